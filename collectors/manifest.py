"""Per-process manifest: who ran (rank, host, pid, device), in which environment, on which versions.

`collect()` returns `{section: {key: value}}` with the sections of the `manifests` table
(tracekit/store/schema.py): `process`, `distributed`, `device`, `versions`, `env`, `packages`.
It never imports torch: it reads what is already imported. Values are strings.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tracekit._version import __version__
from tracekit.collectors.redact import redact_argv, redact_value

ENV_PREFIXES = (
    "NCCL_",
    "CUDA_",
    "TORCH_",
    "PYTORCH_",
    "SGLANG_",
    "VLLM_",
    "OMP_",
    "MASTER_",
    "TRACEKIT_",
)
ENV_NAMES = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "PYTHONPATH",
        "LD_LIBRARY_PATH",
        "NVIDIA_VISIBLE_DEVICES",
    }
)
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
REDACTED = "<redacted>"


def filtered_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that matter for a run, with secret-looking ones redacted."""
    env = dict(os.environ if environ is None else environ)
    out: dict[str, str] = {}
    for name in sorted(env):
        if name in ENV_NAMES or name.startswith(ENV_PREFIXES):
            out[name] = REDACTED if _SECRET.search(name) else redact_value(env[name])
    return out


def _torch_sections(
    device_index: int | None = None, *, with_device: bool = True
) -> tuple[dict[str, str], dict[str, str]]:
    """Versions and the device; `device_index` is the process's CUDA device when known (read on
    the program's own thread: another thread's current device is its own, not the rank's)."""
    versions: dict[str, str] = {}
    device: dict[str, str] = {}
    torch = sys.modules.get("torch")
    if torch is None:
        return versions, device
    versions["torch"] = str(getattr(torch, "__version__", ""))
    try:
        versions["cuda"] = str(torch.version.cuda or "")
        hip = getattr(torch.version, "hip", None)
        if hip:
            versions["hip"] = str(hip)
        if torch.backends.cudnn.is_available():
            versions["cudnn"] = str(torch.backends.cudnn.version())
    except Exception:
        pass
    try:
        if with_device and torch.cuda.is_available() and torch.cuda.is_initialized():
            nccl = torch.cuda.nccl.version()
            versions["nccl"] = (
                ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
            )
            idx = torch.cuda.current_device() if device_index is None else device_index
            props = torch.cuda.get_device_properties(idx)
            device["index"] = str(idx)
            device["name"] = str(props.name)
            device["uuid"] = str(getattr(props, "uuid", ""))
            device["total_global_mem"] = str(props.total_memory)
            device["compute_capability"] = f"{props.major}.{props.minor}"
            device["num_sms"] = str(props.multi_processor_count)
    except Exception:
        pass
    return versions, device


def _git(path: Path) -> dict[str, str]:
    """commit, branch and dirty files of the git checkout holding `path` (empty if none)."""
    root = path if path.is_dir() else path.parent
    for cand in (root, *root.parents):
        if (cand / ".git").exists():
            break
    else:
        return {}

    def run(*args: str) -> str:
        res = subprocess.run(
            ["git", "-C", str(cand), *args], capture_output=True, text=True, timeout=10, check=False
        )
        return res.stdout if res.returncode == 0 else ""

    try:
        out = {
            "commit": run("rev-parse", "HEAD").strip(),
            "branch": run("rev-parse", "--abbrev-ref", "HEAD").strip(),
        }
        # `XY path` lines: the status letters' leading blank is part of the line, so cut each
        # line as it is (stripping the whole output would eat the first path's first letter)
        dirty = [
            line[3:]
            for line in run("status", "--porcelain", "--untracked-files=no").splitlines()
            if line.strip()
        ]
        out["dirty"] = ",".join(dirty)
        return out
    except (OSError, subprocess.SubprocessError):
        return {}


def package_info(package: str | None) -> dict[str, str]:
    """Version (and git state for a checkout) of the server package, without importing it.

    Once a process and package location (`_package_info`): the look-up scans installed
    distributions and runs git, 0.1 to 0.3 s of the GIL on a small venv, which the flush
    thread that writes the manifest must not take from a running program each time the rank
    information changes (the H200 demo's A/B blocks showed 50-400 ms cycles where it did)."""
    if not package:
        return {}
    top = package.split(".")[0]
    mod = sys.modules.get(package) or sys.modules.get(top)
    file = getattr(mod, "__file__", None)
    if file is None:
        try:
            import importlib.util

            spec = importlib.util.find_spec(top)
            file = spec.origin if spec else None
        except (ImportError, ValueError):
            file = None
    return dict(_package_info(package, file))


@functools.lru_cache(maxsize=8)
def _package_info(package: str, file: str | None) -> dict[str, str]:
    """The distribution named like the package is tried first; only when there is none are
    all distributions' top-level names read (the slow part)."""
    out: dict[str, str] = {}
    top = package.split(".")[0]
    try:
        from importlib.metadata import PackageNotFoundError, packages_distributions, version

        try:
            out[package] = version(top)
        except PackageNotFoundError:
            for dist in packages_distributions().get(top, []):
                try:
                    out[package] = version(dist)
                    break
                except PackageNotFoundError:
                    continue
    except Exception:
        pass
    if file:
        for key, val in _git(Path(file)).items():
            out[f"{package}.{key}"] = val
    return out


def collect(
    *,
    package: str | None = None,
    rank_info: dict[str, Any] | None = None,
    with_device: bool = True,
) -> dict[str, dict[str, str]]:
    """`with_device=False`: no device section unless `rank_info` names the CUDA device (the
    caller is a thread of tracekit's, whose current device is not the rank's)."""
    rank_info = rank_info or {}
    dev = rank_info.get("cuda_device")
    known = dev if isinstance(dev, int) else None
    versions, device = _torch_sections(known, with_device=with_device or known is not None)
    versions["python"] = platform.python_version()
    versions["tracekit"] = __version__
    process = {
        "host": socket.gethostname(),
        "pid": str(os.getpid()),
        "ppid": str(os.getppid()),
        "argv": " ".join(redact_argv(sys.argv)),
        "executable": sys.executable,
        "adapter": os.environ.get("TRACEKIT_ADAPTER", ""),
        "mode": os.environ.get("TRACEKIT_MODE", "light"),
        "instrumented": "true",
    }
    distributed: dict[str, str] = {}
    rank = rank_info.get("dist_rank", rank_info.get("env_rank"))
    world = rank_info.get("dist_world_size", rank_info.get("env_world_size"))
    if rank is not None:
        distributed["rank"] = str(rank)
    if world is not None:
        distributed["world_size"] = str(world)
    local = rank_info.get("env_local_rank")
    if local is not None:
        process["local_rank"] = str(local)
    if rank_info.get("dist_backend"):
        distributed["backend"] = str(rank_info["dist_backend"])
    return {
        "process": process,
        "distributed": distributed,
        "device": device,
        "versions": versions,
        "env": filtered_env(),
        "packages": package_info(package),
    }
