"""The manifest side of `tracekit diff`: what differs between two runs' manifests (environment
per rank, packages and commits, versions, GPU medians) and their launched commands
(docs/DEFINITIONS.md, "Diff")."""

from __future__ import annotations

import difflib
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.store.reader import has_table, scan_table

MANIFEST_SECTIONS = ("env", "packages", "versions", "gpu")
GPU_REL_TOLERANCE = 0.01  # GPU medians closer than 1% are not reported as changed


# section -> rank -> key -> value
Manifest = dict[str, dict[int, dict[str, str]]]


def read_manifest(run_dir: Path) -> Manifest:
    """section -> rank -> key -> value (sections of interest only; GPU medians from the
    counters table when the manifest has none)."""
    out: dict[str, dict[int, dict[str, str]]] = {s: {} for s in MANIFEST_SECTIONS}
    if has_table(run_dir, "manifests"):
        rows = (
            scan_table(run_dir, "manifests")
            .filter(pl.col("section").is_in(MANIFEST_SECTIONS))
            .select("rank", "section", "key", "value")
            .collect()
        )
        for rank, section, key, value in rows.iter_rows():
            out[section].setdefault(rank, {})[key] = value
    if not out["gpu"] and has_table(run_dir, "counters"):
        med = (
            scan_table(run_dir, "counters")
            .group_by("rank", pl.col("metric").cast(pl.String))
            .agg(pl.col("value").median())
            .collect()
        )
        for rank, metric, value in med.iter_rows():
            out["gpu"].setdefault(rank, {})[f"{metric}_p50"] = f"{value:g}"
    return out


# Environment variables that differ between any two runs by construction: tracekit's own
# per-run settings and the rendezvous port torch.distributed picks at random.
RUN_SPECIFIC_ENV = ("TRACEKIT_", "MASTER_PORT")


def _differs(section: str, va: str | None, vb: str | None) -> bool:
    if va == vb:
        return False
    if section == "gpu" and va is not None and vb is not None:
        try:
            fa, fb = float(va), float(vb)
        except ValueError:
            return True
        return abs(fb - fa) > GPU_REL_TOLERANCE * max(abs(fa), abs(fb))
    return True


def manifest_changes(
    run_a: Path, run_b: Path, read: tuple[Manifest, Manifest] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Per section, entries `name, a, b` (and `ranks` when only some ranks differ), compared
    rank by rank over the ranks both runs have."""
    ma, mb = read or (read_manifest(run_a), read_manifest(run_b))
    out: dict[str, list[dict[str, Any]]] = {}
    for section in MANIFEST_SECTIONS:
        sa, sb = ma[section], mb[section]
        common = sorted(set(sa) & set(sb))
        keys = sorted({k for r in common for k in (*sa[r], *sb[r])})
        entries = []
        for key in keys:
            if section == "env" and key.startswith(RUN_SPECIFIC_ENV):
                continue
            ranks = [r for r in common if _differs(section, sa[r].get(key), sb[r].get(key))]
            if not ranks:
                continue
            entry: dict[str, Any] = {
                "name": key,
                "a": sa[ranks[0]].get(key),
                "b": sb[ranks[0]].get(key),
            }
            if len(ranks) < len(common):
                entry["ranks"] = ranks
            entries.append(entry)
        out[section] = entries
    return out


def _run_command(run_dir: Path, manifest: Manifest) -> tuple[list[str], str] | None:
    """The launched command (run.json) and the run directory it was launched into."""
    path = Path(run_dir) / "run.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    cmd = data.get("command") if isinstance(data, dict) else None
    if not isinstance(cmd, list) or not all(isinstance(t, str) for t in cmd):
        return None
    launched_into = next(
        (env["TRACEKIT_RUN_DIR"] for env in manifest["env"].values() if "TRACEKIT_RUN_DIR" in env),
        str(run_dir),
    )
    return cmd, launched_into


def _temp_dirs() -> list[str]:
    dirs = {"/tmp", "/var/tmp", tempfile.gettempdir().rstrip("/")}
    return sorted(dirs, key=len, reverse=True)


# a directory `tempfile` made: its prefix (`tmp` by default, or ending in - or _) and 8 random
# characters of [a-z0-9_], right under a temporary directory (the demo's /tmp/tracekit-demo-...)
_TMP_NAME = r"(?:tmp|[\w.-]*[-_])[a-z0-9_]{8}"


def _tmp_paths(token: str) -> str:
    """`token` with every temporary directory made by `tempfile` written as `<tmp>`: such a
    path differs between any two runs of one command."""
    for d in _temp_dirs():
        token = re.sub(re.escape(d) + "/" + _TMP_NAME + r"(?=/|$|[\s,;:=])", "<tmp>", token)
    return token


def command_change(
    run_a: Path, run_b: Path, read: tuple[Manifest, Manifest] | None = None
) -> dict[str, list[str]] | None:
    """Arguments of the launched command that differ (`a`, `b`), paths inside each run's own
    directory written as `<run>`; None when equal or unknown (ingested runs)."""
    ma, mb = read or (read_manifest(run_a), read_manifest(run_b))
    ca, cb = _run_command(run_a, ma), _run_command(run_b, mb)
    if ca is None or cb is None:
        return None
    norm_a = [_tmp_paths(t.replace(ca[1], "<run>")) for t in ca[0]]
    norm_b = [_tmp_paths(t.replace(cb[1], "<run>")) for t in cb[0]]
    if norm_a == norm_b:
        return None
    out: dict[str, list[str]] = {"a": [], "b": []}
    matcher = difflib.SequenceMatcher(a=norm_a, b=norm_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            # a changed value keeps its option's name (`--verify-mode extend`, not `extend`)
            flag = norm_a[i1 - 1 : i1] if i1 and norm_a[i1 - 1].startswith("-") else []
            out["a"] += flag + norm_a[i1:i2]
            out["b"] += flag + norm_b[j1:j2]
    return out
