"""The wheel: `collectors/` and `analyzers/` ship as `tracekit.collectors` / `tracekit.analyzers`,
the one name each of their modules has, in the wheel and in a source checkout."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

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


def _module_names(
    env: dict[str, str], cwd: Path, *, bare: bool = False, first: tuple[str, ...] = ()
) -> dict[str, Any]:
    """module_names.py's report, run in a fresh interpreter from `cwd` (importing the modules
    `first` before the package's). `bare`: as from a checkout nothing is installed from: the
    interpreter reads no .pth file (`-S`: no editable-install finder), the dependencies'
    folders are on its path as plain folders, and the checkout is found from `cwd` alone."""
    run = f"import runpy; runpy.run_path({str(MODULE_NAMES)!r}, run_name='__main__')"
    python = [sys.executable]
    if bare:
        paths = sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
        run = (
            f"import sys; sys.path += {paths!r};"
            "assert not [f for f in sys.meta_path if 'Editable' in repr(f)], sys.meta_path;" + run
        )
        python.append("-S")
    proc = subprocess.run(
        [*python, "-c", run, *first], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return report


def _assert_one_name_each(report: dict[str, Any], roots: list[str]) -> None:
    """Each project file is one module object, named tracekit.*, loaded from `roots`; the
    project imports of the `if TYPE_CHECKING:` blocks were run too."""
    assert report["twice"] == {}
    assert report["outside"] == []
    assert report["roots"] == roots
    assert report["files"] > 100
    assert report["typing_imports"] > 10


CHECKOUT_ROOTS = [str(REPO / d) for d in ("tracekit", "collectors", "analyzers")]


@pytest.fixture(scope="module")
def checkout_report() -> dict[str, Any]:
    """From the checkout's root, through the editable install's finder as set up by `make`."""
    return _module_names(dict(os.environ), REPO)


@pytest.mark.slow
def test_each_module_loads_once_under_one_name_from_the_checkout(
    checkout_report: dict[str, Any], tmp_path: Path
) -> None:
    # GIVEN the source checkout, run from its root (`collectors` and `analyzers` are importable
    # as top-level names there too), and the editable install, run from elsewhere
    # WHEN every module and every project import of the `if TYPE_CHECKING:` blocks is loaded
    # THEN each file is one module object, named tracekit.*, from the checkout's folders
    _assert_one_name_each(checkout_report, CHECKOUT_ROOTS)
    elsewhere = _module_names(dict(os.environ), tmp_path)
    _assert_one_name_each(elsewhere, CHECKOUT_ROOTS)
    assert elsewhere["modules"] == checkout_report["modules"]


@pytest.mark.slow
def test_each_module_loads_once_under_one_name_from_a_bare_checkout(
    checkout_report: dict[str, Any],
) -> None:
    # GIVEN a checkout nothing is installed from (no editable finder to fall back on): only
    # tracekit/_checkout.py maps collectors/ and analyzers/ to their names
    report = _module_names(dict(os.environ), REPO, bare=True)
    # THEN the same modules load, once each, under the same names
    _assert_one_name_each(report, CHECKOUT_ROOTS)
    assert report["modules"] == checkout_report["modules"]


@pytest.mark.slow
def test_a_module_loaded_under_its_folder_name_is_reported() -> None:
    # the check above can fail: in a checkout `collectors.accept` is importable by its folder
    # name, and a module imported so is a second module object of the same file
    report = _module_names(dict(os.environ), REPO, bare=True, first=("collectors.accept",))
    assert report["twice"] == {
        str(REPO / "collectors" / "__init__.py"): ["collectors", "tracekit.collectors"],
        str(REPO / "collectors" / "accept.py"): ["collectors.accept", "tracekit.collectors.accept"],
    }
    assert report["outside"] == ["collectors", "collectors.accept"]


@pytest.mark.slow
def test_each_module_loads_once_under_one_name_from_the_wheel(
    installed: Path, tmp_path: Path, checkout_report: dict[str, Any]
) -> None:
    # cwd outside the checkout, so the source tree cannot shadow the installed copy
    report = _module_names({**os.environ, "PYTHONPATH": str(installed)}, tmp_path)
    package = installed.resolve() / "tracekit"
    _assert_one_name_each(report, [str(package / d) for d in ("", "collectors", "analyzers")])
    # the wheel's modules are the checkout's, under the same names
    assert report["modules"] == checkout_report["modules"]


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
