"""Slices bound for one track (`Slices`), and their begin/end packets in writing order
(`Points`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tracekit.export.perfetto.wire import Piece


@dataclass
class Slices:
    """Slices bound for one track, in the caller's order."""

    track: int
    start: np.ndarray
    end: np.ndarray
    name_iid: np.ndarray
    correlation: np.ndarray | None = None
    flow: np.ndarray | None = None
    instant: np.ndarray | None = None  # bool: instant events (no end)
    special: np.ndarray | None = None  # int: index into the special packets, -1 for none
    args: Piece | None = None  # pre-encoded extra TrackEvent fields of each begin
    order: tuple[np.ndarray, np.ndarray] | None = None  # sweep_order(start, end), if known


@dataclass
class Points:
    """Begin/end (or instant) packets of one track, in writing order."""

    track: int
    ts: np.ndarray
    type: np.ndarray
    iid: np.ndarray  # 0 on ends
    corr: np.ndarray | None = None  # 0 on ends
    flow: np.ndarray | None = None  # 0 on ends
    special: np.ndarray | None = None  # -1: no protobuf-built packet

    def rows(self, sel: slice) -> Points:
        def cut(x: np.ndarray | None) -> np.ndarray | None:
            return None if x is None else x[sel]

        return Points(
            self.track,
            self.ts[sel],
            self.type[sel],
            self.iid[sel],
            cut(self.corr),
            cut(self.flow),
            cut(self.special),
        )


def chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))
