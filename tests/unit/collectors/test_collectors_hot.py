"""The recorder's hot attributes (collectors/recording/hot.py): `active`, `cycle`, `_rows`, ...
are properties over `_hot`, the C struct the native hot path reads (`_native.Hot`) or, on the
Python path, `HotState`; both start alike and hold what the recorder's attributes hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording import hot, native


def _recorder(tmp_path: Path, use_native: bool) -> Recorder:
    if use_native and native.NATIVE is None:
        pytest.skip(native.WHY_NOT)
    return Recorder(RecorderConfig(raw_dir=tmp_path / "raw", native=use_native, gpu_sample=8))


@pytest.mark.parametrize("use_native", [True, False])
def test_the_recorders_hot_attributes_are_its_hot_objects_fields(
    tmp_path: Path, use_native: bool
) -> None:
    # GIVEN a recorder on either path
    rec = _recorder(tmp_path, use_native)
    h: Any = rec._hot
    assert type(h) is (native.NATIVE.Hot if use_native else hot.HotState)  # type: ignore[union-attr]
    # THEN each attribute reads its field: the starting values set in RecorderState
    assert (h.active, h.cycle, h.captures, h.gpu_every) == (True, -1, -1, 8)
    assert h.rows is rec._rows
    assert h.loc is rec._loc
    assert h.next_seq is rec._next_seq
    for attr, field in hot.FIELDS.items():
        assert getattr(rec, attr) is getattr(h, field) or getattr(rec, attr) == getattr(h, field)
    # WHEN the recorder's attributes are written, THEN the fields hold the values, and back
    rec.cycle += 3
    rec.set_recording(False)
    rec._captures = 0
    rec._last_flush = 1_796_281_804_117_662_145
    marker = object()
    rec._cuda = marker
    assert (h.cycle, h.active, h.captures, h.last_flush) == (2, False, 0, 1_796_281_804_117_662_145)
    assert h.cuda is marker
    h.cycle = 41
    assert rec.cycle == 41
    rec._cuda = None
    rec.set_recording(True)
    rec.close()


def test_the_native_hot_object_starts_as_the_python_one() -> None:
    if native.NATIVE is None:
        pytest.skip(native.WHY_NOT)
    c, p = native.NATIVE.Hot(), hot.HotState()
    assert {f: getattr(c, f) for f in hot.FIELDS.values()} == {
        f: getattr(p, f) for f in hot.FIELDS.values()
    }


def test_the_native_call_refuses_a_recorder_without_the_native_hot_object(tmp_path: Path) -> None:
    rec = _recorder(tmp_path, use_native=False)
    if native.NATIVE is None:
        pytest.skip(native.WHY_NOT)
    with pytest.raises(TypeError, match="_hot is not the native Hot"):
        native.NATIVE.PhaseCall(rec, len, object(), len, None, False, 0)
    rec.close()
