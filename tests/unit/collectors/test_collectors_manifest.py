from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.collectors.manifest import REDACTED, collect, filtered_env, package_info


def test_env_is_filtered_and_secrets_redacted() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_TOKEN": "hf_secret",
        "VLLM_API_KEY": "sk-123",
        "SGLANG_SECRET_THING": "s",
        "NCCL_IB_PASSWORD": "p",
        "MASTER_ADDR": "10.0.0.1",
        "RANK": "3",
        "PYTHONPATH": "/x",
        "HOME": "/root",
        "OMP_NUM_THREADS": "1",
    }
    out = filtered_env(env)
    assert out == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "MASTER_ADDR": "10.0.0.1",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_PASSWORD": REDACTED,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": "/x",
        "RANK": "3",
        "SGLANG_SECRET_THING": REDACTED,
        "VLLM_API_KEY": REDACTED,
    }
    assert "hf_secret" not in str(out)


def _git(repo: Path, *args: str) -> str:
    res = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return res.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")
def test_collect_sections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a server package that is a git checkout of its own: one commit on branch `spec`,
    # then one tracked file edited and one untracked file
    repo = tmp_path / "checkout"
    pkg = repo / "tk_fake_server"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "engine.py").write_text("Y = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "checkout", "-q", "-b", "spec")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    (pkg / "engine.py").write_text("Y = 2\n")
    (pkg / "notes.txt").write_text("untracked\n")
    monkeypatch.syspath_prepend(str(repo))
    importlib.invalidate_caches()
    # WHEN the manifest is collected for it (the package is found, not imported)
    m = collect(
        package="tk_fake_server",
        rank_info={"dist_rank": 2, "dist_world_size": 4, "env_local_rank": 2},
    )
    # THEN every section is there, and the package's git state is the one made above
    assert set(m) == {"process", "distributed", "device", "versions", "env", "packages"}
    assert m["distributed"]["rank"] == "2"
    assert m["distributed"]["world_size"] == "4"
    assert m["process"]["local_rank"] == "2"
    assert m["versions"]["python"].count(".") == 2
    assert "tracekit" in m["versions"]
    assert "tk_fake_server" not in sys.modules
    assert len(head) == 40
    assert m["packages"]["tk_fake_server.commit"] == head
    assert m["packages"]["tk_fake_server.branch"] == "spec"
    assert set(m["packages"]) == {
        "tk_fake_server.commit",
        "tk_fake_server.branch",
        "tk_fake_server.dirty",
    }


def _dirty_checkout(tmp_path: Path, edited: list[str]) -> Path:
    repo = tmp_path / "checkout"
    pkg = repo / "tk_fake_dirty"
    pkg.mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py"):
        (pkg / name).write_text("X = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    for name in edited:
        (pkg / name).write_text("X = 2\n")
    return repo


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")
def test_dirty_files_are_named_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a checkout with two tracked files edited
    repo = _dirty_checkout(tmp_path, ["a.py", "b.py"])
    monkeypatch.syspath_prepend(str(repo))
    importlib.invalidate_caches()
    # THEN both are named, path as git gives it, comma-separated
    info = package_info("tk_fake_dirty")
    assert info["tk_fake_dirty.dirty"] == "tk_fake_dirty/a.py,tk_fake_dirty/b.py"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")
def test_a_clean_checkout_has_no_dirty_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _dirty_checkout(tmp_path, [])
    monkeypatch.syspath_prepend(str(repo))
    importlib.invalidate_caches()
    assert package_info("tk_fake_dirty")["tk_fake_dirty.dirty"] == ""


def test_a_package_outside_any_checkout_has_no_git_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a package in a plain directory (no .git above it: tmp_path is outside any checkout)
    assert not any((d / ".git").exists() for d in (tmp_path, *tmp_path.parents))
    (tmp_path / "tk_fake_plain").mkdir()
    (tmp_path / "tk_fake_plain" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    # THEN nothing is reported for it (no version: it is not an installed distribution)
    assert package_info("tk_fake_plain") == {}
