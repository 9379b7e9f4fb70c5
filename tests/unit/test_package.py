"""The wheel: `collectors/` and `analyzers/` ship as `tracekit.collectors` / `tracekit.analyzers`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns(
    ".venv",
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "_work",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "runs",
    "sample_traces",
    "tests",
    "docs",
    "bench",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Build from a copy so a concurrent build in the checkout cannot collide with this one.
    src = tmp_path_factory.mktemp("src") / "tracekit"
    shutil.copytree(REPO, src, ignore=IGNORE)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--skip-dependency-check",
            "--outdir",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (whl,) = out.glob("tracekit_spec-*.whl")
    return whl


@pytest.mark.slow
def test_wheel_layout(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "tracekit/collectors/__init__.py" in names
    assert "tracekit/analyzers/__init__.py" in names
    assert "tracekit/analyzers/temporal.py" in names
    assert "tracekit/store/ingest.py" in names
    assert "tracekit/py.typed" in names
    # nothing generic lands at the top of site-packages
    tops = {n.split("/", 1)[0] for n in names}
    assert tops <= {"tracekit"} | {t for t in tops if t.startswith("tracekit_spec-")}
    # every package of the checkout is in the wheel (pyproject lists them one by one)
    inits = [
        i
        for top in ("tracekit", "collectors", "analyzers")
        for i in REPO.glob(f"{top}/**/__init__.py")
    ]
    assert len(inits) >= 10
    for init in inits:
        rel = init.relative_to(REPO)
        if rel.parts[0] != "tracekit":
            rel = Path("tracekit") / rel
        assert rel.as_posix() in names, f"{rel.parent} is missing from pyproject's packages"
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "tracekit = tracekit.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    # the native hot path is compiled in (a compiler is here), its C sources are not shipped
    assert [n for n in names if n.startswith("tracekit/collectors/recording/_native.")]
    assert not [n for n in names if n.endswith((".c", ".h"))]


@pytest.mark.slow
def test_wheel_imports_and_runs(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = (
        "import tracekit, tracekit.collectors, tracekit.analyzers, tracekit.analyzers.temporal;"
        "import tracekit.store.ingest;"
        f"assert tracekit.__file__.startswith({str(target)!r}), tracekit.__file__;"
        f"assert tracekit.analyzers.__file__.startswith({str(target)!r});"
        f"assert tracekit.collectors.__file__.startswith({str(target)!r});"
        "from tracekit.collectors.recording import native;"
        "assert native.NATIVE is not None, native.WHY_NOT"
    )
    # cwd outside the checkout, so the source tree cannot shadow the installed copy
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    helped = subprocess.run(
        [sys.executable, "-m", "tracekit", "--help"],
        check=True,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert "ingest" in helped.stdout
    assert "temporal" in helped.stdout
