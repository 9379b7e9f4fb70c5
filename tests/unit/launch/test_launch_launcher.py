"""The launcher's pure helpers: run-directory names, interpreter flags, the child's
environment, target checks, the /proc watcher. `launch` itself runs in
tests/integration/test_launch_*.py."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tracekit.collectors import phasemap as pm
from tracekit.collectors import runtime as rt
from tracekit.launch.env import BOOTSTRAP_DIR, build_env
from tracekit.launch.options import LaunchOptions
from tracekit.launch.preflight import check_targets, python_flags_warning
from tracekit.launch.rundir import _slug, create_run_dir, default_name
from tracekit.launch.supervise import ProcessWatcher


def test_two_launches_never_share_a_run_directory(tmp_path: Path) -> None:
    dirs = [create_run_dir(tmp_path, "same") for _ in range(3)]
    assert [d.name for d in dirs] == ["same", "same-1", "same-2"]
    assert all(d.is_dir() for d in dirs)


def test_default_name_is_a_timestamp_and_the_program() -> None:
    stamp = r"\d{8}-\d{6}-"
    assert re.fullmatch(
        stamp + "sglang.launch_server",
        default_name([sys.executable, "-m", "sglang.launch_server", "--tp", "8"]),
    )
    assert re.fullmatch(stamp + "vllm", default_name(["vllm", "serve", "m"]))
    assert re.fullmatch(stamp + "bench", default_name(["python3", "/x/bench.py", "-n", "3"]))
    assert re.fullmatch(stamp + "run", default_name([]))


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("a b/c", "a-b-c"),
        ("..x..", "x"),
        ("ü", "run"),  # nothing usable left
        ("x" * 50, "x" * 40),
    ],
)
def test_slug(text: str, slug: str) -> None:
    assert _slug(text) == slug


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["python", "-I", "x.py"], "-I"),
        (["python3.11", "-u", "-E", "x.py"], "-E"),
        (["python", "-uS", "x.py"], "-uS"),  # combined short flags
        (["python3", "-u", "x.py"], None),
        (["python", "-m", "m", "-E"], None),  # after -m: the module's own arguments
        (["python", "x.py", "-I"], None),  # after the script: the script's arguments
        (["vllm", "-E"], None),  # not a Python interpreter
        ([], None),
    ],
)
def test_python_flags_warning(command: list[str], flag: str | None) -> None:
    warning = python_flags_warning(command)
    if flag is None:
        assert warning is None
    else:
        assert warning is not None
        assert warning.startswith(f"`{flag}` makes Python ignore PYTHONPATH")


def test_build_env_points_the_child_at_the_bootstrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a parent environment with a PYTHONPATH and TRACEKIT_DISABLE set (the documented
    # way to measure the launcher's own cost: it must reach the child, issue 14)
    monkeypatch.setenv("PYTHONPATH", "/old")
    monkeypatch.setenv(rt.ENV_DISABLE, "1")
    pmap = pm.parse('[adapter]\nname = "mine"\n\n[[phase]]\nname = "verify"\ntargets = ["m:f"]\n')
    opts = LaunchOptions(
        command=["x"],
        phasemap_path=tmp_path / "map.toml",
        mode="full",
        profile_cycles="4:3",
        flush_records=17,
        flush_seconds=0.5,
        extra_env={"EXTRA": "1"},
    )
    # WHEN the child's environment is built
    env = build_env(tmp_path / "run", opts, pmap, tmp_path / "raw" / "phasemap.toml")
    # THEN the bootstrap comes first on PYTHONPATH and the run's settings are passed down
    assert env["PYTHONPATH"] == f"{BOOTSTRAP_DIR}{os.pathsep}/old"
    assert env[rt.ENV_RUN_DIR] == str((tmp_path / "run").resolve())
    assert env[rt.ENV_PHASES] == str((tmp_path / "raw" / "phasemap.toml").resolve())
    # messages about the map name the user's file, not the run's copy
    assert env[rt.ENV_PHASES_SOURCE] == str((tmp_path / "map.toml").resolve())
    assert env[rt.ENV_ADAPTER] == "mine"
    assert env[rt.ENV_MODE] == "full"
    assert env[rt.ENV_PROFILE_CYCLES] == "4:3"
    assert env[rt.ENV_FLUSH_RECORDS] == "17"
    assert env[rt.ENV_FLUSH_SECONDS] == "0.5"
    assert env["EXTRA"] == "1"
    assert env[rt.ENV_DISABLE] == "1"
    assert (BOOTSTRAP_DIR / "sitecustomize.py").is_file()


def test_build_env_without_a_pythonpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    pmap = pm.parse('[[phase]]\nname = "verify"\ntargets = ["m:f"]\n')
    opts = LaunchOptions(command=["x"], phasemap_path=tmp_path / "m.toml")
    env = build_env(tmp_path, opts, pmap, tmp_path / "m.toml")
    assert env["PYTHONPATH"] == str(BOOTSTRAP_DIR)
    assert rt.ENV_PROFILE_CYCLES not in env  # light mode: no profiling window


def test_check_targets_in_given_sources(tmp_path: Path) -> None:
    # GIVEN a source tree with one module holding class Engine with a method step
    pkg = tmp_path / "srv"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("class Engine:\n    def step(self):\n        pass\n")
    pmap = pm.parse(
        '[[phase]]\nname = "verify"\ntargets = ["srv.engine:Engine.step"]\n\n'
        '[[phase]]\nname = "draft"\ntargets = ["srv.engine:Engine.draft", "srv.nope:f"]\n'
    )
    # THEN the two missing targets are named, each with why
    bad = dict(check_targets(pmap, [tmp_path]))
    assert set(bad) == {"srv.engine:Engine.draft", "srv.nope:f"}
    assert bad["srv.engine:Engine.draft"].startswith("attribute not found")
    assert bad["srv.nope:f"].startswith("module not found")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_process_watcher_sees_this_process() -> None:
    w = ProcessWatcher(os.getsid(0))
    alive = w.scan()
    assert os.getpid() in alive
    me = w.seen[os.getpid()]
    assert me["ppid"] == os.getppid()
    assert me["argv"]
    # another session's watcher does not see it
    other = ProcessWatcher(-1)
    assert os.getpid() not in other.scan()


def test_the_gpu_sample_and_flush_batch_defaults_are_the_recorders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN `tracekit launch` with no --gpu-sample, and a rank whose environment has none
    import click

    from tracekit.cli import cli
    from tracekit.collectors.recording.gpu import DEFAULT_GPU_SAMPLE

    launch = cli.get_command(click.Context(cli), "launch")
    assert launch is not None
    option = next(p for p in launch.params if p.name == "gpu_sample")
    monkeypatch.delenv(rt.ENV_GPU_SAMPLE, raising=False)
    monkeypatch.delenv(rt.ENV_FLUSH_RECORDS, raising=False)
    # THEN the CLI's default, the rank's default and the constant are one number: 8
    assert DEFAULT_GPU_SAMPLE == 8
    assert option.default == DEFAULT_GPU_SAMPLE
    # and the rows a flush is started by: launch's default is the recorder's
    from tracekit.collectors.recorder import DEFAULT_FLUSH_RECORDS
    from tracekit.launch.options import LaunchOptions

    assert LaunchOptions(["x"], Path("m.toml")).flush_records == DEFAULT_FLUSH_RECORDS == 4096
    rec = rt._recorder(
        tmp_path, pm.parse('[[phase]]\nname = "verify"\ntargets = ["m:f"]\n'), "test"
    )
    try:
        assert rec.config.gpu_sample == 8  # the recorder a rank makes from its environment
        assert rec.config.flush_records == 4096
    finally:
        rec.close()
