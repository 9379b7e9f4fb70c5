"""Cycle membership of full-mode annotations (hand-built ranges, known answers)."""

from __future__ import annotations

import polars as pl

from tracekit.analyzers.cycles import assign_cycles
from tracekit.store.placement import nest

EMPTY_MARKS = pl.DataFrame(schema={"start_ns": pl.Int64, "end_ns": pl.Int64})


def _inst(rows: list[tuple[str, int, int]]) -> pl.DataFrame:
    return nest(
        pl.DataFrame(
            {
                "pid": [1] * len(rows),
                "tid": [1] * len(rows),
                "phase": [r[0] for r in rows],
                "start_ns": [r[1] for r in rows],
                "end_ns": [r[2] for r in rows],
                "source": ["annotation"] * len(rows),
            }
        )
    )


def _collector(spans: list[tuple[int, int]], accept: list[float | None]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "cycle": list(range(len(spans))),
            "start_ns": [s for s, _ in spans],
            "end_ns": [e for _, e in spans],
            "accept_len": accept,
            "source": ["starts_with:x"] * len(spans),
        },
        schema_overrides={"accept_len": pl.Float64},
    )


def _top_cycles(out: pl.DataFrame) -> list[tuple[int, str]]:
    top = out.filter(pl.col("depth") == 0).sort("start_ns")
    return list(zip(top["cycle"].to_list(), top["phase"].to_list(), strict=True))


def test_verify_starting_cycles_keep_their_annotations() -> None:
    # GIVEN vLLM-like cycles (starts_with verify) recorded by the collector, 1000..5000 and
    # 6000..10000, and annotations that open 8 µs before and close 8 µs after each record
    collector = _collector([(1_000_000, 5_000_000), (6_000_000, 10_000_000)], [2.0, 3.0])
    inst = _inst(
        [
            ("verify", 992_000, 3_008_000),
            ("draft", 3_092_000, 5_008_000),
            ("verify", 5_992_000, 8_008_000),
            ("draft", 8_092_000, 10_008_000),
        ]
    )
    # WHEN the annotations are given cycles
    out, cycles = assign_cycles(inst, EMPTY_MARKS, collector, rank=0)
    # THEN each lands in the cycle of its record (was -1 for every verify by start lookup)
    assert _top_cycles(out) == [(0, "verify"), (0, "draft"), (1, "verify"), (1, "draft")]
    assert cycles["accept_len"].to_list() == [2.0, 3.0]


def test_draft_with_nested_verify_stays_a_draft_of_its_cycle() -> None:
    # GIVEN HF-like cycles (starts_with draft): the draft model's forward ("verify" target)
    # runs twice inside get_candidates, then the target's forward; annotations open 5 µs early
    collector = _collector([(1_000_000, 5_000_000), (5_500_000, 9_000_000)], [None, None])
    inst = _inst(
        [
            ("draft", 995_000, 3_000_000),
            ("verify", 1_100_000, 1_500_000),
            ("verify", 1_600_000, 2_000_000),
            ("verify", 3_100_000, 5_000_000),
            ("draft", 5_495_000, 7_000_000),
            ("verify", 5_600_000, 6_000_000),
            ("verify", 7_100_000, 8_990_000),
        ]
    )
    out, _ = assign_cycles(inst, EMPTY_MARKS, collector, rank=0)
    # THEN outermost wins: top level is draft then verify in each cycle; the nested verify
    # ranges are draft's sub-phases, in the cycle of their draft
    assert _top_cycles(out) == [(0, "draft"), (0, "verify"), (1, "draft"), (1, "verify")]
    nested = out.filter(pl.col("depth") > 0).sort("start_ns")
    assert nested["parent"].to_list() == ["draft"] * 3
    assert nested["cycle"].to_list() == [0, 0, 1]


def test_instance_between_cycles_is_outside_any() -> None:
    collector = _collector([(1_000_000, 2_000_000), (5_000_000, 6_000_000)], [None, None])
    inst = _inst([("verify", 1_000_000, 2_000_000), ("prefill", 3_000_000, 4_000_000)])
    out, _ = assign_cycles(inst, EMPTY_MARKS, collector, rank=0)
    assert _top_cycles(out) == [(0, "verify"), (-1, "prefill")]
