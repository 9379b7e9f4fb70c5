"""What changed between two runs, biggest significant change first.

Per phase: the median wall time of its instances (all ranks, each run's steady-state cycles:
analyzers/steady.py) in run A and run B, the
change, a bootstrap 95% interval of the change (resampling each run's instances with
replacement, fixed seed, so the same two runs always give the same interval), a significance
flag (the interval excludes 0), the change of the forward / allreduce / overhead medians, the
share of instances that replayed a graph and the allreduce implementations. Then the manifest:
environment per rank, packages and commits, versions, GPU clock and power medians.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.analyzers.headline import headline
from tracekit.analyzers.model import RunAnalysis, analyze
from tracekit.analyzers.rules import RuleTable, load_rules
from tracekit.analyzers.steady import CycleChoice, decide
from tracekit.errors import InputError
from tracekit.store.reader import has_table, scan_table

NS_PER_MS = 1_000_000
RESAMPLES = 1000
SEED = 20261129
MANIFEST_SECTIONS = ("env", "packages", "versions", "gpu")
MIN_INSTANCES = 3  # fewer instances in either run: never flagged significant
GPU_REL_TOLERANCE = 0.01  # GPU medians closer than 1% are not reported as changed


def _median_ms(values: pl.Series) -> float | None:
    med = values.median()
    return None if med is None else float(med) / NS_PER_MS  # type: ignore[arg-type]


def _boot_medians(values: pl.Series, resamples: int, seed: int) -> pl.Series:
    """Medians of `resamples` resamples (with replacement) of `values`, deterministic."""
    n = values.len()
    draws = values.sample(n * resamples, with_replacement=True, seed=seed)
    return (
        pl.DataFrame({"v": draws, "g": pl.int_range(n * resamples, eager=True) // n})
        .group_by("g")
        .agg(pl.col("v").median())
        .sort("g")["v"]
    )


def bootstrap_ci(
    a: pl.Series, b: pl.Series, *, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """95% percentile interval of median(b) - median(a), in the values' unit."""
    diffs = _boot_medians(b, resamples, seed + 1) - _boot_medians(a, resamples, seed)
    lo = diffs.quantile(0.025, interpolation="linear")
    hi = diffs.quantile(0.975, interpolation="linear")
    return float(lo), float(hi)  # type: ignore[arg-type]


def _impl_counts(rows: pl.DataFrame) -> dict[str, int]:
    counts = rows.filter(pl.col("allreduce_impl").is_not_null()).group_by("allreduce_impl").len()
    return dict(sorted(counts.iter_rows()))


def phase_changes(
    a: pl.DataFrame, b: pl.DataFrame, *, resamples: int = RESAMPLES, seed: int = SEED
) -> dict[str, dict[str, Any]]:
    """DESIGN's diff `phases` map from two breakdowns, biggest significant change first."""
    out: list[tuple[str, dict[str, Any]]] = []
    for phase in sorted(set(a["phase"].to_list()) | set(b["phase"].to_list())):
        ra, rb = a.filter(pl.col("phase") == phase), b.filter(pl.col("phase") == phase)
        entry: dict[str, Any] = {
            "a_ms_p50": _median_ms(ra["wall_ns"]),
            "b_ms_p50": _median_ms(rb["wall_ns"]),
            "delta_ms": None,
            "ci95_ms": None,
            "significant": False,
            "a_count": ra.height,
            "b_count": rb.height,
        }
        for part in ("forward", "allreduce", "overhead"):
            ma, mb = _median_ms(ra[f"{part}_ns"]), _median_ms(rb[f"{part}_ns"])
            entry[f"{part}_delta_ms"] = None if ma is None or mb is None else mb - ma
        if ra.height and rb.height:
            entry["delta_ms"] = entry["b_ms_p50"] - entry["a_ms_p50"]
            lo, hi = bootstrap_ci(
                ra["wall_ns"].cast(pl.Float64),
                rb["wall_ns"].cast(pl.Float64),
                resamples=resamples,
                seed=seed,
            )
            entry["ci95_ms"] = [lo / NS_PER_MS, hi / NS_PER_MS]
            enough = min(ra.height, rb.height) >= MIN_INSTANCES
            entry["significant"] = enough and (lo > 0 or hi < 0)
        entry["graph_replayed_frac"] = {
            "a": _frac(ra["graph_replayed"]),
            "b": _frac(rb["graph_replayed"]),
        }
        entry["allreduce_impl"] = {"a": _impl_counts(ra), "b": _impl_counts(rb)}
        out.append((phase, entry))
    out.sort(key=lambda kv: (not kv[1]["significant"], -abs(kv[1]["delta_ms"] or 0.0), kv[0]))
    return dict(out)


def _frac(s: pl.Series) -> float | None:
    m = s.cast(pl.Float64).mean()
    return None if m is None else float(m)  # type: ignore[arg-type]


# ---- manifest ---------------------------------------------------------------------------------


# section -> rank -> key -> value
Manifest = dict[str, dict[int, dict[str, str]]]


def _manifest(run_dir: Path) -> Manifest:
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
    ma, mb = read or (_manifest(run_a), _manifest(run_b))
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


def command_change(
    run_a: Path, run_b: Path, read: tuple[Manifest, Manifest] | None = None
) -> dict[str, list[str]] | None:
    """Arguments of the launched command that differ (`a`, `b`), paths inside each run's own
    directory written as `<run>`; None when equal or unknown (ingested runs)."""
    ma, mb = read or (_manifest(run_a), _manifest(run_b))
    ca, cb = _run_command(run_a, ma), _run_command(run_b, mb)
    if ca is None or cb is None:
        return None
    norm_a = [t.replace(ca[1], "<run>") for t in ca[0]]
    norm_b = [t.replace(cb[1], "<run>") for t in cb[0]]
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


def diff_runs(
    run_a: Path,
    run_b: Path,
    *,
    rules: Path | RuleTable | None = None,
    impl_table: Path | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    choice: CycleChoice | None = None,
) -> dict[str, Any]:
    """`diff_of` the runs in two run directories, analysed with the same rules."""
    table = rules if isinstance(rules, RuleTable) else load_rules(rules)
    an_a = analyze(run_a, rules=table, impl_table=impl_table)
    an_b = analyze(run_b, rules=table, impl_table=impl_table)
    return diff_of(an_a, an_b, resamples=resamples, seed=seed, choice=choice)


def diff_of(
    an_a: RunAnalysis,
    an_b: RunAnalysis,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    choice: CycleChoice | None = None,
) -> dict[str, Any]:
    """DESIGN's diff fields (`phases`, `manifest`) plus `headline` (list of sentences) and
    `steady` (each run's steady state): the phases compare each run's steady-state cycles."""
    run_a, run_b = an_a.run_dir, an_b.run_dir
    st_a, st_b = decide(an_a.recorded, choice), decide(an_b.recorded, choice)
    (a, note_a), (b, note_b) = st_a.keep_shares(an_a.breakdown), st_b.keep_shares(an_b.breakdown)
    world_a, world_b = a["rank"].n_unique(), b["rank"].n_unique()
    if world_a != world_b:
        msg = (
            f"{run_b} has {world_b} rank(s) and {run_a} has {world_a}: diff compares runs of one "
            "world size; compare runs of the same tensor-parallel size, or look at each with "
            "`tracekit summary`"
        )
        raise InputError(msg)
    phases = phase_changes(a, b, resamples=resamples, seed=seed)
    read = (_manifest(Path(run_a)), _manifest(Path(run_b)))  # each run's manifests, read once
    manifest = manifest_changes(Path(run_a), Path(run_b), read)
    env_known = bool(read[0]["env"]) and bool(read[1]["env"])
    command = command_change(Path(run_a), Path(run_b), read)
    lines = headline(phases, manifest, env_known=env_known, command=command)
    lines += [f"{w}: {st.note}." for w, st in (("A", st_a), ("B", st_b)) if st.note]
    lines += [f"{w}: {n}." for w, n in (("A", note_a), ("B", note_b)) if n]
    return {
        "a": str(run_a),
        "b": str(run_b),
        "ranks": world_a,
        "headline": lines,
        "steady": {"a": st_a.to_json(), "b": st_b.to_json()},
        "phases": phases,
        "manifest": manifest,
        "command": command,
    }
