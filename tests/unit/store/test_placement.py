"""`nest` (whole columns) against the stack walk it replaces (`_nest_loop`), and by hand."""

from __future__ import annotations

import random

import polars as pl
from polars.testing import assert_frame_equal

from tracekit.store.placement import _nest_loop, nest, nesting_order

SCHEMA = {
    "pid": pl.Int64,
    "tid": pl.Int64,
    "phase": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}


def _walk(ranges: pl.DataFrame) -> pl.DataFrame:
    df = nesting_order(ranges)
    out: pl.DataFrame = _nest_loop(
        df.with_row_index("inst").with_columns(pl.col("inst").cast(pl.Int64))
    )
    return out


def _frame(rows: list[tuple[int | None, int, str, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def test_crossing_ranges_follow_the_stack_walk() -> None:
    # a [0,10) holds b [5,15); c [12,20) starts after a ended but b is still open, so the
    # walk (which only pops from the top) keeps a under b: c is at depth 2, parent b, top a;
    # d [16,18) starts after b ended but inside c; e [21,22) after everything: a new top
    out = nest(
        _frame(
            [
                (1, 1, "a", 0, 10),
                (1, 1, "b", 5, 15),
                (1, 1, "c", 12, 20),
                (1, 1, "d", 16, 18),
                (1, 1, "e", 21, 22),
                (1, 2, "f", 6, 7),  # another thread: its own top
            ]
        )
    )
    got = {r["phase"]: (r["depth"], r["parent"], r["top"]) for r in out.iter_rows(named=True)}
    assert got == {
        "a": (0, None, 0),
        "b": (1, "a", 0),
        "c": (2, "b", 0),
        "d": (3, "c", 0),
        "e": (0, None, 4),
        "f": (0, None, 5),
    }


def test_same_start_longer_first_and_touching_ends() -> None:
    out = nest(_frame([(0, 0, "in", 0, 5), (0, 0, "out", 0, 9), (0, 0, "next", 9, 12)]))
    assert out.select("phase", "depth", "parent", "top").rows() == [
        ("out", 0, None, 0),
        ("in", 1, "out", 0),
        ("next", 0, None, 2),  # starts where `out` ends: not inside it
    ]


def test_random_ranges_match_the_walk() -> None:
    rng = random.Random(15)
    for _ in range(400):
        span = rng.choice([5, 30, 200])
        rows = []
        for _ in range(rng.randint(0, 60)):
            s = rng.randint(0, span)
            d = rng.choice([0, 1, 2, 5, 10, 40, 500])
            rows.append((rng.choice([0, 1, None]), rng.choice([7, 8]), rng.choice("abc"), s, s + d))
        ranges = _frame(rows)
        assert_frame_equal(nest(ranges), _walk(ranges))


def test_empty_and_null_ends() -> None:
    empty = _frame([])
    assert_frame_equal(nest(empty), _walk(empty))
    # a null end takes the walk itself (which treats it as it always did)
    out = nest(_frame([(0, 0, "a", 0, 10)]).with_columns(pl.lit(None, pl.Int64).alias("end_ns")))
    assert out["depth"].to_list() == [0]
