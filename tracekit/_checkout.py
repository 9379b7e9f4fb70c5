"""Importing tracekit from a source checkout, where two subpackages live outside `tracekit/`.

An install maps the repository's top-level `collectors/` and `analyzers/` to `tracekit.collectors`
and `tracekit.analyzers` (pyproject.toml's `package-dir`). Python started from the repository root
(`python -m tracekit`, a server launched there, a bench script) imports the checkout's
`tracekit/` instead, which has neither; this module extends the package's search path with the
repository root so both resolve to the checkout's own folders. Nothing changes for an install:
there the folders sit inside the package, and the root is not a checkout.
"""

from __future__ import annotations

from collections.abc import MutableSequence
from pathlib import Path

MAPPED = ("collectors", "analyzers")


def checkout_root(package_dir: Path) -> Path | None:
    """The repository root when `package_dir` is the `tracekit/` of a source checkout."""
    root = package_dir.parent
    if (package_dir / MAPPED[0]).is_dir():
        return None  # installed layout: the subpackages are inside
    if not (root / "pyproject.toml").is_file():
        return None
    if all((root / name / "__init__.py").is_file() for name in MAPPED):
        return root
    return None


def map_checkout_subpackages(path: MutableSequence[str]) -> None:
    """Append the checkout's root to the package `path` (tracekit's `__path__`) when needed.

    Only `collectors` and `analyzers` are meant to be found there; the root's other folders
    (tests, bench, docs) are not subpackages and are never imported as `tracekit.*`.
    """
    if not path:
        return
    root = checkout_root(Path(path[0]))
    if root is not None and str(root) not in path:
        path.append(str(root))
