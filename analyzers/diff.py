"""What changed between runs, biggest significant change first.

`tracekit diff BASELINE... RUN`: one or more baseline runs, then the run under test. Per phase:
the median wall time of its instances (all ranks, each run's steady-state cycles:
analyzers/steady.py; in full mode the like cycles of analyzers/diffstats.py) in the baseline(s)
and in the run, the change and a 95% interval of it: with several baselines from the
run-to-run spread of their medians (`noise: "runs"`, analyzers/diffstats.py), with one a
bootstrap resampling each run's instances (`noise: "within-run"`; fixed seed, so the same runs
always give the same interval), a significance flag (the interval excludes 0), the change of
the forward / allreduce / overhead medians, the share of instances that replayed a graph and
the allreduce implementations. Then the manifest against the first baseline: environment per
rank, packages and commits, versions, GPU clock and power medians, the launched command.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.analyzers.diffmanifest import command_change, manifest_changes, read_manifest
from tracekit.analyzers.diffstats import RunsInterval, like_cycles
from tracekit.analyzers.headline import headline
from tracekit.analyzers.rules import RuleTable, load_rules
from tracekit.analyzers.run_analysis import RunAnalysis, analyze
from tracekit.analyzers.steady import CycleChoice, Steady, decide
from tracekit.errors import InputError

NS_PER_MS = 1_000_000
RESAMPLES = 1000
SEED = 20261129
MIN_INSTANCES = 3  # fewer instances in either run: never flagged significant


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


def _phase_rows(frames: list[pl.DataFrame], phase: str) -> list[pl.DataFrame]:
    return [f.filter(pl.col("phase") == phase) for f in frames]


def _mean_of_medians(rows: list[pl.DataFrame], col: str) -> float | None:
    """The mean over runs of each run's median of `col` (one run: its median), ms."""
    meds = [m for r in rows if (m := _median_ms(r[col])) is not None]
    return statistics.fmean(meds) if meds else None


def phase_changes(
    a: pl.DataFrame | Sequence[pl.DataFrame],
    b: pl.DataFrame,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    shares: tuple[Sequence[pl.DataFrame], pl.DataFrame] | None = None,
) -> dict[str, dict[str, Any]]:
    """DESIGN's diff `phases` map from the baselines' breakdowns (one frame, or one a run) and
    the run's, biggest significant change first. `shares`: the baselines' and the run's rows
    the forward / allreduce / overhead, graph and allreduce figures come from, when not the
    same rows as the wall times (full mode: the profiled window's; the times from every
    cycle's collector records, columns rank, cycle, phase, wall_ns)."""
    bases = [a] if isinstance(a, pl.DataFrame) else list(a)
    sh_bases, sh_b = (list(shares[0]), shares[1]) if shares else (bases, b)
    pooled, sh_pooled = _pool(bases), _pool(sh_bases)
    out: list[tuple[str, dict[str, Any]]] = []
    for phase in sorted(set(pooled["phase"].to_list()) | set(b["phase"].to_list())):
        runs = [r for r in _phase_rows(bases, phase) if r.height]
        ra, rb = pooled.filter(pl.col("phase") == phase), b.filter(pl.col("phase") == phase)
        entry: dict[str, Any] = {
            "a_ms_p50": _mean_of_medians(runs, "wall_ns"),
            "b_ms_p50": _median_ms(rb["wall_ns"]),
            "delta_ms": None,
            "ci95_ms": None,
            "significant": False,
            "noise": "runs" if len(bases) > 1 else "within-run",
            "a_runs_ms_p50": [_median_ms(r["wall_ns"]) for r in runs],
            "a_count": ra.height,
            "b_count": rb.height,
        }
        if ra.height and rb.height:
            entry.update(_interval(runs, ra, rb, multi=len(bases) > 1, r=resamples, seed=seed))
        entry.update(_shares(phase, sh_bases, sh_pooled, sh_b))
        out.append((phase, entry))
    out.sort(key=lambda kv: (not kv[1]["significant"], -abs(kv[1]["delta_ms"] or 0.0), kv[0]))
    return dict(out)


def _pool(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]


def _shares(
    phase: str, bases: list[pl.DataFrame], pooled: pl.DataFrame, b: pl.DataFrame
) -> dict[str, Any]:
    """The component deltas, graph-replay shares and allreduce implementations of a phase."""
    runs = [r for r in _phase_rows(bases, phase) if r.height]
    ra, rb = pooled.filter(pl.col("phase") == phase), b.filter(pl.col("phase") == phase)
    out: dict[str, Any] = {}
    for part in ("forward", "allreduce", "overhead"):
        ma, mb = _mean_of_medians(runs, f"{part}_ns"), _median_ms(rb[f"{part}_ns"])
        out[f"{part}_delta_ms"] = None if ma is None or mb is None else mb - ma
    out["graph_replayed_frac"] = {
        "a": _frac(ra["graph_replayed"]),
        "b": _frac(rb["graph_replayed"]),
    }
    out["allreduce_impl"] = {"a": _impl_counts(ra), "b": _impl_counts(rb)}
    return out


def _interval(
    runs: list[pl.DataFrame],
    ra: pl.DataFrame,
    rb: pl.DataFrame,
    *,
    multi: bool,
    r: int,
    seed: int,
) -> dict[str, Any]:
    """`delta_ms`, `ci95_ms`, `significant` (and `noise`) of one phase present in both."""
    lo, hi = bootstrap_ci(
        ra["wall_ns"].cast(pl.Float64), rb["wall_ns"].cast(pl.Float64), resamples=r, seed=seed
    )
    lo, hi = lo / NS_PER_MS, hi / NS_PER_MS
    a_ms = _mean_of_medians(runs, "wall_ns") or 0.0  # both have rows: never None here
    b_ms = _median_ms(rb["wall_ns"]) or 0.0
    out: dict[str, Any] = {"delta_ms": b_ms - a_ms}
    if multi and len(runs) >= 2:
        iv = RunsInterval(
            tuple(float(_median_ms(x["wall_ns"]) or 0.0) for x in runs), b_ms, (hi - lo) / 2
        )
        lo, hi = iv.ci95()
        enough = rb.height >= MIN_INSTANCES
    else:
        if multi:  # several baselines, but only one of them ran the phase
            out["noise"] = "within-run"
        enough = min(ra.height, rb.height) >= MIN_INSTANCES
    out["ci95_ms"] = [lo, hi]
    out["significant"] = enough and (lo > 0 or hi < 0)
    return out


def _frac(s: pl.Series) -> float | None:
    m = s.cast(pl.Float64).mean()
    return None if m is None else float(m)  # type: ignore[arg-type]


def diff_runs(
    *runs: Path,
    rules: Path | RuleTable | None = None,
    impl_table: Path | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    choice: CycleChoice | None = None,
) -> dict[str, Any]:
    """`diff_of` the runs in run directories (baselines, then the run under test), analysed
    with the same rules."""
    if len(runs) < 2:
        msg = "tracekit diff needs at least two run directories: BASELINE... RUN"
        raise InputError(msg)
    table = rules if isinstance(rules, RuleTable) else load_rules(rules)
    analyses = [analyze(r, rules=table, impl_table=impl_table) for r in runs]
    return diff_of(analyses[:-1], analyses[-1], resamples=resamples, seed=seed, choice=choice)


def _world_check(analyses: list[RunAnalysis], rows: list[pl.DataFrame]) -> int:
    worlds = [r["rank"].n_unique() for r in rows]
    for an, w in zip(analyses[:-1], worlds[:-1], strict=True):
        if w != worlds[-1]:
            msg = (
                f"{analyses[-1].run_dir} has {worlds[-1]} rank(s) and {an.run_dir} has {w}: diff "
                "compares runs of one world size; compare runs of the same tensor-parallel "
                "size, or look at each with `tracekit summary`"
            )
            raise InputError(msg)
    return worlds[-1]


def _windowed(an: RunAnalysis) -> bool:
    """A full-mode run: its breakdown covers a profiled window of its recorded cycles."""
    rec = an.recorded
    if rec.height == 0 or "profiled" not in rec.columns:
        return False
    return bool(rec["profiled"].any()) and not bool(rec["profiled"].all())


def diff_of(
    an_a: RunAnalysis | Sequence[RunAnalysis],
    an_b: RunAnalysis,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    choice: CycleChoice | None = None,
) -> dict[str, Any]:
    """DESIGN's diff fields (`phases`, `manifest`) plus `headline` (list of sentences),
    `steady` (each run's steady state), `baselines` and `like_cycles`: the phases compare each
    run's steady-state cycles (full mode: the like cycles), the baselines' run-to-run spread
    giving the interval when there are several."""
    bases = [an_a] if isinstance(an_a, RunAnalysis) else list(an_a)
    analyses = [*bases, an_b]
    steadies = [decide(an.recorded, choice) for an in analyses]
    kept = [st.keep_shares(an.breakdown) for st, an in zip(steadies, analyses, strict=True)]
    rows = [r for r, _ in kept]
    world = _world_check(analyses, rows)
    windowed = any(map(_windowed, analyses))
    like = like_cycles(rows, [an.breakdown for an in analyses], windowed)
    if like.cycles is not None:
        keep = list(like.cycles)  # like cycles may lie outside a run's steady state
        rows = [an.breakdown.filter(pl.col("cycle").is_in(keep)) for an in analyses]
    timed, timed_note = _timed_rows(analyses, steadies) if windowed else (None, None)
    if timed is not None:
        shares = (rows[:-1], rows[-1])
        phases = phase_changes(timed[:-1], timed[-1], resamples=resamples, seed=seed, shares=shares)
    else:
        phases = phase_changes(rows[:-1], rows[-1], resamples=resamples, seed=seed)
    run_a, run_b = Path(bases[0].run_dir), Path(an_b.run_dir)
    read = (read_manifest(run_a), read_manifest(run_b))  # each run's manifests, read once
    manifest = manifest_changes(run_a, run_b, read)
    env_known = bool(read[0]["env"]) and bool(read[1]["env"])
    command = command_change(run_a, run_b, read)
    noise = _noise_line(len(bases))
    lines = headline(phases, manifest, env_known=env_known, command=command, noise=noise)
    for n in (timed_note, like.note):
        if n:
            lines.append(n[0].upper() + n[1:] + ".")
    names = [f"A{i + 1}" for i in range(len(bases))] if len(bases) > 1 else ["A"]
    for w, st, (_, note) in zip([*names, "B"], steadies, kept, strict=True):
        lines += [f"{w}: {n}." for n in (st.note, note) if n]
    return {
        "a": str(run_a) if len(bases) == 1 else f"{len(bases)} baselines ({run_a}, ...)",
        "b": str(run_b),
        "baselines": [str(x.run_dir) for x in bases],
        "ranks": world,
        "noise": "runs" if len(bases) > 1 else "within-run",
        "like_cycles": None if like.cycles is None else list(like.cycles),
        "timed_cycles": None if timed is None else _count_cycles(timed),
        "headline": lines,
        "steady": {
            "a": steadies[0].to_json(),
            "b": steadies[-1].to_json(),
            **({"baselines": [s.to_json() for s in steadies[:-1]]} if len(bases) > 1 else {}),
        },
        "phases": phases,
        "manifest": manifest,
        "command": command,
    }


def _timed_rows(
    analyses: list[RunAnalysis], steadies: list[Steady]
) -> tuple[list[pl.DataFrame] | None, str | None]:
    """Full mode: every run's phase times (`timed`, the collector's records) in the cycles
    steady in every run, and a sentence saying how many; (None, None) when none is."""
    common = sorted(set.intersection(*[set(st.kept) for st in steadies]))
    if not common:
        return None, None
    rows = [
        an.timed.filter(pl.col("cycle").is_in(common) & (pl.col("cycle") >= 0)) for an in analyses
    ]
    if any(r.height == 0 for r in rows):
        return None, None
    span = str(common[0]) if len(common) == 1 else f"{common[0]}-{common[-1]}"
    note = (
        f"full mode: phase times compared over the {len(common)} cycle(s) steady in every run "
        f"(cycles {span}, the collector's timing)"
    )
    return rows, note


def _count_cycles(rows: list[pl.DataFrame]) -> int:
    return int(rows[-1]["cycle"].n_unique())


def _noise_line(k: int) -> str:
    if k > 1:
        return (
            f"Noise from {k} baseline runs: each interval is the run-to-run spread of the "
            "baselines' medians (a 95% prediction interval for one more run)."
        )
    return (
        "Run-to-run noise is unknown (one baseline): intervals cover only the sampling of "
        "instances within each run, and two runs of one command can differ by more; give "
        "several baselines (`tracekit diff BASE1 BASE2 BASE3 RUN`) for a gate that knows it."
    )
