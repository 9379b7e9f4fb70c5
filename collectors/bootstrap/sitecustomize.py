"""tracekit bootstrap: the only file of the directory `tracekit launch` puts on PYTHONPATH.

Python imports `sitecustomize` at start-up in every interpreter that reads PYTHONPATH, so every
process of the launched tree (spawned, forked or exec'd) passes here. Outside a tracekit run
(`TRACEKIT_RUN_DIR` unset) it only chains to the `sitecustomize` that was importable before,
and does nothing else. Inside a run it installs tracekit's import hook; it never imports the
server, torch or pyarrow itself.
"""

import os
import sys


def _tracekit_chain() -> None:
    """Import the sitecustomize this one shadows (a distribution's or a virtualenv's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    positions = [i for i, p in enumerate(saved) if os.path.abspath(p or os.curdir) == here]
    sys.path[:] = [p for p in saved if os.path.abspath(p or os.curdir) != here]
    sys.modules.pop("sitecustomize", None)
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            sys.stderr.write(f"tracekit: error in the chained sitecustomize: {exc!r}\n")
    except Exception as exc:  # as site.py does: report and go on
        sys.stderr.write(f"tracekit: error in the chained sitecustomize: {exc!r}\n")
    finally:
        if "sitecustomize" not in sys.modules and mine is not None:
            sys.modules["sitecustomize"] = mine
        for i in positions:
            if here not in sys.path:
                sys.path.insert(min(i, len(sys.path)), here)


def _tracekit_activate() -> None:
    if not os.environ.get("TRACEKIT_RUN_DIR"):
        return
    if os.environ.get("TRACEKIT_DISABLE", "") not in ("", "0"):
        return  # this process of the tree opted out: import nothing of tracekit
    try:
        from tracekit.collectors.runtime import activate

        activate(via="sitecustomize")
    except Exception as exc:
        sys.stderr.write(
            f"tracekit: could not instrument pid {os.getpid()} ({type(exc).__name__}: {exc}); "
            "this process runs without tracekit\n"
        )


_tracekit_chain()
_tracekit_activate()
