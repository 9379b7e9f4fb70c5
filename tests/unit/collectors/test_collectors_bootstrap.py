from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tracekit.collectors.phasemap import builtin_path
from tracekit.launch.env import BOOTSTRAP_DIR

PROBE = (
    "import sys, json; "
    "print(json.dumps({'tk': sorted(m for m in sys.modules if m.startswith('tracekit')), "
    "'heavy': [m for m in ('pyarrow', 'torch', 'polars', 'numpy', 'nvtx') if m in sys.modules], "
    "'other': getattr(sys.modules.get('sitecustomize'), 'OTHER', None)}))"
)


def _run(
    tmp_path: Path, other_src: str | None, **env_extra: str
) -> subprocess.CompletedProcess[str]:
    paths = [str(BOOTSTRAP_DIR)]
    if other_src is not None:
        other = tmp_path / "other"
        other.mkdir(exist_ok=True)
        (other / "sitecustomize.py").write_text(other_src)
        paths.append(str(other))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )


def test_bootstrap_dir_holds_only_sitecustomize() -> None:
    files = sorted(p.name for p in BOOTSTRAP_DIR.iterdir() if p.name != "__pycache__")
    assert files == ["sitecustomize.py"]


def test_no_op_outside_a_run_and_chains_to_the_shadowed_sitecustomize(tmp_path: Path) -> None:
    # GIVEN another sitecustomize further down PYTHONPATH (a distribution's, a venv's)
    res = _run(tmp_path, "print('OTHER_SITE_RAN')\nOTHER = 7\n")
    # THEN it ran exactly once, and nothing of tracekit was imported
    assert res.stdout.count("OTHER_SITE_RAN") == 1
    out = json.loads(res.stdout.splitlines()[-1])
    assert out == {"tk": [], "heavy": [], "other": 7}
    assert res.stderr == ""


def test_chained_sitecustomize_error_is_reported_and_the_program_runs(tmp_path: Path) -> None:
    res = _run(tmp_path, "raise RuntimeError('distro site broke')\n")
    assert "tracekit: error in the chained sitecustomize" in res.stderr
    assert "distro site broke" in res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["tk"] == []


def test_activates_inside_a_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "raw").mkdir(parents=True)
    res = _run(
        tmp_path,
        "OTHER = 1\n",
        TRACEKIT_RUN_DIR=str(run),
        TRACEKIT_PHASES=str(builtin_path("demo")),
    )
    out = json.loads(res.stdout.splitlines()[-1])
    assert "tracekit.collectors.runtime" in out["tk"]
    assert out["other"] == 1
    # nothing heavy at start-up
    assert out["heavy"] == []
    assert not any(m.startswith(("tracekit.demo", "tracekit.store.merge")) for m in out["tk"])
    (proc,) = list((run / "raw").glob("pid-*/process.json"))
    info = json.loads(proc.read_text())
    assert info["instrumented"] is True
    assert info["via"] == "sitecustomize"
    assert info["finished"] is True


def test_bad_configuration_warns_once_and_runs_uninstrumented(tmp_path: Path) -> None:
    res = _run(
        tmp_path,
        None,
        TRACEKIT_RUN_DIR=str(tmp_path / "run"),
        TRACEKIT_PHASES=str(tmp_path / "missing.toml"),
    )
    assert res.stderr.count("tracekit: could not instrument pid") == 1
    assert json.loads(res.stdout.splitlines()[-1])["tk"] != []  # tried, then went on


LOADER = (
    "from importlib.metadata import entry_points; import sys; "
    "[ep.load()() for ep in entry_points(group=sys.argv[1]) if ep.name == 'tracekit']; "
    "import tracekit.collectors.runtime as rt; print(rt.current() is not None)"
)


def test_plugin_entry_points_cover_isolated_interpreters(tmp_path: Path) -> None:
    # GIVEN a `python -I` rank (ignores PYTHONPATH: the bootstrap cannot load) whose server
    # loads its plugins the way vLLM's load_general_plugins / SGLang's load_plugins do
    run = tmp_path / "run"
    (run / "raw").mkdir(parents=True)
    for group, via in (
        ("vllm.general_plugins", "plugin:vllm"),
        ("sglang.srt.plugins", "plugin:sglang"),
    ):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
        env.update(
            TRACEKIT_RUN_DIR=str(run),
            TRACEKIT_PHASES=str(builtin_path("demo")),
            PYTHONPATH=str(BOOTSTRAP_DIR),
        )
        res = subprocess.run(
            [sys.executable, "-I", "-c", LOADER, group],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert res.stdout.strip() == "True", res.stderr
        vias = [json.loads(p.read_text())["via"] for p in run.glob("raw/pid-*/process.json")]
        assert via in vias
    # outside a run the plugins do nothing
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    res = subprocess.run(
        [sys.executable, "-I", "-c", LOADER, "vllm.general_plugins"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert res.stdout.strip() == "False"
