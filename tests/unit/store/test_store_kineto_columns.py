"""The Kineto reader's column conversions (tracekit/store/kineto/columns.py) and its args structs
(fallback.py), directly: exact nanoseconds from JSON microseconds, start times with the base
time, durations, and the typed args fields agreeing with the `events` table. Expected values are
worked out by hand in the comments."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from tracekit.store.kineto import Args, BatchStats, LooseArgs, exact_ns
from tracekit.store.kineto.columns import (
    ARG_INT32_FIELDS,
    ARG_STR_FIELDS,
    _counter_value,
    durations,
    start_times,
)
from tracekit.store.kineto.fallback import _arg_lists
from tracekit.store.schema import EVENTS


def test_exact_ns_of_three_decimal_microseconds() -> None:
    # 0.001 µs = 1 ns; 1.5 µs = 1500 ns; 1234567.891 µs = 1_234_567_891 ns. 0.1 + 0.2 is the
    # double 0.30000000000000004, whose nearest k/1000 is 0.3 µs but which is not the double
    # 0.3: it is kept as round(x * 1000) = 300 ns all the same.
    ns, ok = exact_ns([0.001, 1.5, 1234567.891, 0.1 + 0.2], relative=True)
    assert ns.tolist() == [1, 1500, 1_234_567_891, 300]
    assert ok.tolist() == [True, True, True, True]


def test_exact_ns_of_integers_and_mixed_types() -> None:
    # integers are multiplied exactly; an old absolute-µs epoch time too (1.7e15 µs)
    ns, ok = exact_ns([7, -2, 1_700_000_000_123_456], relative=False)
    assert ns.tolist() == [7000, -2000, 1_700_000_000_123_456_000]
    assert ok.all()
    # ints and floats in one column: 1 µs and 2.5 µs
    ns, ok = exact_ns([1, 2.5], relative=True)
    assert ns.tolist() == [1000, 2500]
    assert ok.all()


def test_exact_ns_refuses_what_is_not_a_time() -> None:
    # a string, null, a bool, infinity, NaN, and 1e16 µs (past int64 ns, about 9.2e15 µs)
    values = ["10.250", None, True, float("inf"), float("nan"), 1e16, 3.0]
    ns, ok = exact_ns(values, relative=True)
    assert ok.tolist() == [False, False, False, False, False, False, True]
    assert ns[-1] == 3000
    ns, ok = exact_ns([None, None], relative=True)
    assert ok.tolist() == [False, False]


def test_start_times_add_the_base_time_and_count_unusable_rows() -> None:
    # GIVEN relative µs with a base time of 1e18 ns; one ts past int64 once the base is added
    stats = BatchStats()
    base = 10**18
    far = 9.0e15 - 1.0  # a time on its own, but base + far * 1000 overflows int64
    # WHEN
    ns, ok = start_times([1.5, "x", far], offset=base, relative=True, stats=stats)
    # THEN 1.5 µs -> base + 1500 ns; the string and the overflow are skipped and counted
    assert ok.tolist() == [True, False, False]
    assert int(ns[0]) == base + 1500
    assert stats.skipped == 2


def test_durations_clamp_negative_and_unusable_to_zero() -> None:
    stats = BatchStats()
    dur = durations(np.array([3.25, -1.0, np.nan, 0.0]), stats=stats)
    # 3.25 µs = 3250 ns; -1 µs is clamped and counted; NaN is unusable -> 0, not counted
    assert dur.tolist() == [3250, 0, 0, 0]
    assert stats.negative_dur == 1


@pytest.mark.parametrize(
    ("raw", "value"),
    [(b'{"bytes": 5}', 5.0), (b'{"a": "x", "b": 2.5}', 2.5), (b'{"a": true}', None), (b"{", None)],
)
def test_counter_value_is_the_first_number(raw: bytes, value: float | None) -> None:
    assert _counter_value(raw) == value


def test_args_structs_name_the_same_fields_as_the_events_table() -> None:
    # one list of the typed args fields: the strict and the loose struct agree, every field is
    # an `events` column of the type the converters give it
    fields = Args.__struct_fields__
    assert LooseArgs.__struct_fields__ == fields
    assert set(_arg_lists([])) == set(fields)
    names = set(EVENTS.names)
    assert set(fields) <= names
    assert set(fields) >= ARG_STR_FIELDS | ARG_INT32_FIELDS
    for f in ARG_STR_FIELDS:
        assert str(EVENTS.field(f).type) == "string", f
    for f in ARG_INT32_FIELDS:
        assert str(EVENTS.field(f).type) == "int32", f


def test_args_struct_reads_kinetos_spelling() -> None:
    raw = b'{"External id": 4, "Collective name": "allreduce", "In msg nelems": 8, "stream": 7}'
    a = msgspec.json.decode(raw, type=Args)
    assert (a.external_id, a.collective, a.msg_nelems, a.stream) == (4, "allreduce", 8, 7)
    assert a.device is None
