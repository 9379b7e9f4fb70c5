"""Write a run directory as one native Perfetto trace (`.pftrace`, protobuf).

Layout, per rank (one process each, named `rank R · HOST · pid PID`):

- `cycles`: one slice a cycle (args: accept_len, wall/forward/allreduce/overhead ns summed
  from the breakdown, graph_replayed, allreduce_impl);
- `phases`: one slice a phase instance (args: its breakdown row: wall_ns, forward_ns,
  allreduce_ns, overhead_ns, graph_replayed, graph_kernel_frac, allreduce_impl, kernels,
  accept_len); nested phases below their parent;
- `GPU D` with a child track a stream (`stream S`); kernels that overlap on a stream go to lane
  tracks `stream S · lane K` (never dropped);
- the rank's CPU threads (Kineto CPU events; partially overlapping ones on `· overlap K` tracks);
- NVML counters, one counter track a (GPU, metric);
- with `flows=True`, an arrow from each runtime call to each kernel it launched (one flow id a
  kernel: a flow id cannot fork).

All timestamps are the store's absolute ns, one time base for all ranks. Ranks are written one
after the other, each on its own packet sequence with its own interned names, so memory is
bounded by the largest rank. Descriptors, interning and slices with arguments are built with
the `perfetto` package's `StreamingTraceProtoBuilder`; the bulk of plain slices (kernels, CPU
ops) is encoded vectorised (packets.py), the same framing, into the same file.

Modules: run.py (the entry points, worker processes), rank.py (one rank's packet sequence),
phases.py, events.py, counters.py (the tracks), writer.py (the protobuf-built packets and the
metadata), slices.py and lanes.py (slices, lanes and begin/end order), packets.py, pack.py and
wire.py (the vectorised encoder).
"""

from tracekit.export.perfetto.inputs import ExportStats
from tracekit.export.perfetto.run import export, export_run, write_perfetto

__all__ = ["ExportStats", "export", "export_run", "write_perfetto"]
