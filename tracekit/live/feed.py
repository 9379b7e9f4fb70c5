"""One poll of a running (or finished) run: new phase instances and cycles, per rank.

`LiveFeed` joins the tail (`tail.py`) and the rules (`instances.py`) and resolves each process to
its rank the way merge does: the torch.distributed rank it recorded, else `RANK`; a single
process with records and no rank is rank 0. A process's batches wait (bounded) until its rank
is known: it is written in `process.json` right after the first flush.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.live.instances import Cycle, Instance, LiveModel, run_cycle_rule
from tracekit.live.tail import ProcessTail, RunTail

if TYPE_CHECKING:
    import pyarrow as pa

    from tracekit.store.raw.cycle_rule import CycleRule

MAX_PENDING_BATCHES = 1000  # per process without a rank yet; older ones are counted lost


@dataclass
class Polled:
    instances: list[Instance] = field(default_factory=list)
    cycles: list[Cycle] = field(default_factory=list)


class LiveFeed:
    def __init__(self, raw: Path, rule: CycleRule | None = None) -> None:
        self.raw = raw
        self.rule = rule or run_cycle_rule(raw.parent / "run.json")
        self.tail = RunTail(raw)
        self.model = LiveModel(self.rule)
        self._pending: dict[int, list[pa.RecordBatch]] = {}
        self._finished: set[int] = set()
        self.unranked_lost = 0  # records of processes whose rank never became known in time

    def rank_of(self, p: ProcessTail) -> int | None:
        rank = p.rank
        if rank is not None:
            return rank
        with_records = [q for q in self.tail.procs.values() if q.records]
        if len(with_records) == 1 and with_records[0] is p and p.info.get("finished"):
            return 0  # merge's rule: a single process with records and no rank is rank 0
        return None

    def poll(self) -> Polled:
        out = Polled()
        for p, batch in self.tail.poll():
            self._pending.setdefault(p.pid, []).append(batch)
        for pid, batches in list(self._pending.items()):
            p = self.tail.procs[pid]
            rank = self.rank_of(p)
            if rank is None:
                while len(batches) > MAX_PENDING_BATCHES:
                    self.unranked_lost += batches.pop(0).num_rows
                continue
            for batch in batches:
                inst, cyc = self.model.feed(p, batch, rank)
                out.instances += inst
                out.cycles += cyc
            del self._pending[pid]
        for p in self.tail.procs.values():
            if (
                p.info.get("finished")
                and p.pid not in self._finished
                and p.pid not in self._pending
            ):
                rank = self.rank_of(p)
                if rank is not None and p.segment is not None and p.segment.done:
                    self._finished.add(p.pid)
                    out.cycles += self.model.finish(p, rank)
        return out

    def ranks(self) -> dict[int, list[ProcessTail]]:
        by: dict[int, list[ProcessTail]] = {}
        for p in self.tail.procs.values():
            rank = self.rank_of(p)
            if rank is not None and (p.records or p.info.get("records")):
                by.setdefault(rank, []).append(p)
        return by

    def lost(self) -> dict[tuple[int, str], int]:
        """(rank, reason) -> records lost: deleted by retention before merge could read them
        (`retention`), buffered in a process whose recorder failed (`recorder_failed`)."""
        out: dict[tuple[int, str], int] = {}
        for rank, procs in self.ranks().items():
            out[(rank, "retention")] = sum(p.dropped_records() for p in procs)
            failed = 0
            for p in procs:
                b = p.info.get("buffered", 0)
                if p.info.get("failed") and isinstance(b, int):
                    failed += b
            out[(rank, "recorder_failed")] = failed
        return out
