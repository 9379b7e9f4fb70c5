"""The wheel: `collectors/` and `analyzers/` ship as `tracekit.collectors` / `tracekit.analyzers`,
the one name each of their modules has, in the wheel and in a source checkout."""

from __future__ import annotations

import ast
import json
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
    "typecheck",
)


MODULE_NAMES = Path(__file__).with_name("module_names.py")
# `python -m build` output lines that say "warning" and are none of setuptools': the interpreter
# runs with PYTHONDONTWRITEBYTECODE here, and distutils says it skips byte-compiling
NOT_SETUPTOOLS = ("byte-compiling is disabled",)


def _package_folders() -> set[str]:
    """The dotted name of every folder of the package in the checkout that holds a file."""
    out = set()
    for top in ("tracekit", "collectors", "analyzers"):
        for d in [REPO / top, *(REPO / top).rglob("*")]:
            if d.is_dir() and d.name != "__pycache__" and any(f.is_file() for f in d.iterdir()):
                parts = d.relative_to(REPO).parts
                out.add(".".join(parts if top == "tracekit" else ("tracekit", *parts)))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel built from a copy of the checkout, and what the build printed."""
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
    return whl, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def wheel(built: tuple[Path, str]) -> Path:
    return built[0]


@pytest.mark.slow
def test_build_prints_no_setuptools_warning(built: tuple[Path, str]) -> None:
    # pyproject's license is an SPDX string (a table is deprecated) and every folder of the
    # package is listed in `packages` (a data folder left out is "absent from the packages
    # configuration")
    _, printed = built
    warned = [
        line
        for line in printed.splitlines()
        if "warning" in line.lower() and not any(s in line for s in NOT_SETUPTOOLS)
    ]
    assert warned == []


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
    # every folder of the checkout's package is listed in pyproject's `packages`, so in the wheel
    tomllib = pytest.importorskip("tomllib")
    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    assert listed == _package_folders()
    for init in [
        i
        for top in ("tracekit", "collectors", "analyzers")
        for i in REPO.glob(f"{top}/**/__init__.py")
    ]:
        rel = init.relative_to(REPO)
        if rel.parts[0] != "tracekit":
            rel = Path("tracekit") / rel
        assert rel.as_posix() in names, f"{rel.parent} is missing from the wheel"
    assert "tracekit/collectors/bootstrap/sitecustomize.py" in names
    assert "tracekit/collectors/phasemaps/vllm.toml" in names
    assert "tracekit/analyzers/data/allreduce_impl.toml" in names
    assert "tracekit/report/templates/report.html" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "tracekit = tracekit.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    # the native hot path is compiled in (a compiler is here), its C sources are not shipped
    assert [n for n in names if n.startswith("tracekit/collectors/recording/_native.")]
    assert not [n for n in names if n.endswith((".c", ".h"))]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a folder of its own (put it on PYTHONPATH)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", str(target), str(wheel)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return target


@pytest.mark.slow
def test_wheel_imports_and_runs(installed: Path, tmp_path: Path) -> None:
    target = installed
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


def _module_names(env: dict[str, str], cwd: Path) -> dict[str, object]:
    """module_names.py's report, run in a fresh interpreter from `cwd`."""
    run = f"import runpy; runpy.run_path({str(MODULE_NAMES)!r}, run_name='__main__')"
    proc = subprocess.run(
        [sys.executable, "-c", run], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return report


@pytest.mark.slow
def test_each_module_loads_once_under_one_name_from_the_checkout() -> None:
    # GIVEN the source checkout (the editable install), run from its root: `collectors` and
    # `analyzers` are importable as top-level names there too
    # WHEN every module and every project import of the `if TYPE_CHECKING:` blocks is loaded
    report = _module_names(dict(os.environ), REPO)
    # THEN each file is one module object, named tracekit.*
    assert report["twice"] == {}
    assert report["outside"] == []
    assert report["roots"] == [str(REPO / d) for d in ("tracekit", "collectors", "analyzers")]
    assert isinstance(report["files"], int)
    assert report["files"] > 100
    assert isinstance(report["typing_imports"], int)
    assert report["typing_imports"] > 10


@pytest.mark.slow
def test_each_module_loads_once_under_one_name_from_the_wheel(
    installed: Path, tmp_path: Path
) -> None:
    # cwd outside the checkout, so the source tree cannot shadow the installed copy
    report = _module_names({**os.environ, "PYTHONPATH": str(installed)}, tmp_path)
    assert report["twice"] == {}
    assert report["outside"] == []
    assert isinstance(report["roots"], list)
    assert len(report["roots"]) == 3
    assert all(root.startswith(str(installed)) for root in report["roots"])
    assert isinstance(report["files"], int)
    assert report["files"] > 100


def _imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in the file, `if TYPE_CHECKING:` blocks too."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def test_every_import_names_the_package() -> None:
    # the top-level folders are never imported by their folder name, whatever imports them
    wrong = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for top in ("tracekit", "collectors", "analyzers", "tests", "bench", "scripts")
        for path in sorted((REPO / top).rglob("*.py"))
        for line, module in _imports_of(path)
        if module.split(".")[0] in ("collectors", "analyzers")
    ]
    assert wrong == []
