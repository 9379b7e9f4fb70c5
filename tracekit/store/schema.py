"""The Parquet store's tables: column specs, one place, versioned.

Every table is a dataset under `RUN_DIR/store/<table>/rank=<r>/part-*.parquet` (hive-partitioned
by rank; the `rank` column comes from the directory, files do not repeat it). Every file carries
the key-value metadata `tracekit.schema_version` and `tracekit.version`. Timestamps are int64
nanoseconds since the Unix epoch, one time base for all ranks.

Readers must refuse files whose schema version is newer than `SCHEMA_VERSION` (SchemaError with
the fix: upgrade tracekit).
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1

# Metadata keys written into every Parquet file and artifact.
META_SCHEMA_VERSION = "tracekit.schema_version"
META_TRACEKIT_VERSION = "tracekit.version"

_dict_str = pa.dictionary(pa.int32(), pa.string())

# events: every Kineto trace event worth keeping (complete `X` events; instants `i` and counters
# `C` where useful). One row an event.
EVENTS = pa.schema(
    [
        # Kineto category: kernel, cuda_runtime, cpu_op, user_annotation, ...
        pa.field("cat", _dict_str),
        pa.field("name", _dict_str),  # event name (kernel names demangled, as written)
        pa.field("ph", _dict_str),  # "X" complete, "i" instant, "C" counter
        pa.field("start_ns", pa.int64()),  # absolute ns, common time base
        pa.field("dur_ns", pa.int64()),  # >= 0 (negative durations clamped to 0 and counted)
        # OS pid for CPU rows, device index for GPU rows; null if not numeric
        pa.field("pid", pa.int64()),
        # OS tid for CPU rows, stream id for GPU rows; null if not numeric
        pa.field("tid", pa.int64()),
        pa.field("device", pa.int32()),  # GPU rows: args.device (else pid); null for CPU rows
        # GPU rows (kernel, gpu_memcpy, gpu_memset, gpu_user_annotation, Stream Sync): stream id; null for CPU rows
        pa.field("stream", pa.int64()),
        pa.field("correlation", pa.int64()),  # args.correlation (runtime call <-> GPU activity)
        pa.field("external_id", pa.int64()),  # args["External id"]
        pa.field("cbid", pa.int32()),  # runtime/driver callback id (kept for "INVALID" names)
        # GPU row whose correlation is a cuda/cu/hipGraphLaunch on this rank (null on CPU rows)
        pa.field("graph_launched", pa.bool_()),
        # args["Collective name"] (record_param_comms, NCCL kernels)
        pa.field("collective", pa.string()),
        pa.field("dtype", pa.string()),  # args["dtype"]
        pa.field("msg_nelems", pa.int64()),  # args["In msg nelems"]
        pa.field("group_size", pa.int32()),  # args["Group size"]
        pa.field("pg_name", pa.string()),  # args["Process Group Name"]
        pa.field("bytes", pa.int64()),  # gpu_memcpy / gpu_memset args.bytes
        pa.field("value", pa.float64()),  # counter value (ph == "C")
        # the event's args object as JSON text as written (ingest; ends in "\n"), null when its typed columns hold them all (cuda_runtime/cuda_driver) or it has none
        pa.field("args", pa.string()),
    ]
)

# Parquet dictionary-encodes these events columns (the dictionary-typed ones and the repetitive
# collective strings); hashing every `args` text would be wasted.
EVENTS_DICT_COLUMNS = (
    *(f.name for f in EVENTS if pa.types.is_dictionary(f.type)),
    "collective",
    "dtype",
    "pg_name",
)

# manifests: long format, one row a (rank, section, key). Sections:
#   trace        source_file, trace_name, kineto_schema_version, time_base ("relative_ns" or
#                "absolute_us"), base_time_ns, display_time_unit
#   distributed  backend, rank, world_size, pg_count, nccl_version, pg_config (JSON)
#   device       name, total_global_mem, compute_capability, num_sms, uuid, index, properties (JSON)
#   versions     cuda_runtime, cuda_driver, cupti, hip_runtime, roctracer, python, torch, cuda,
#                cudnn, nccl, tracekit
#   env          one key a variable, as the process saw it (secrets redacted)
#   packages     name -> version; "<name>.commit", "<name>.branch", "<name>.dirty" for git checkouts
#   process      host, pid, local_rank, argv, adapter, mode, instrumented
#   gpu          NVML medians over the run (sm_clock_mhz_p50, power_w_p50, ...)
MANIFESTS = pa.schema(
    [
        pa.field("section", pa.string()),
        pa.field("key", pa.string()),
        pa.field("value", pa.string()),
    ]
)

# phases: one row a wrapped phase call recorded by the collector (light mode; full mode too).
PHASES = pa.schema(
    [
        pa.field("cycle", pa.int64()),  # cycle number on this rank (-1: outside any cycle)
        pa.field("phase", _dict_str),  # draft, verify, draft_extend, allreduce, decode, user names
        pa.field("depth", pa.int32()),  # 0 = outermost tracekit phase on its thread
        pa.field("parent", _dict_str),  # enclosing phase name (null at depth 0)
        pa.field("pid", pa.int64()),
        pa.field("tid", pa.int64()),
        pa.field("seq", pa.int64()),  # call order on this rank
        pa.field("start_ns", pa.int64()),  # CPU wall clock (time.time_ns), absolute
        pa.field("end_ns", pa.int64()),
        # from CUDA events on the current stream, absolute; null on CPU
        pa.field("gpu_start_ns", pa.int64()),
        pa.field("gpu_end_ns", pa.int64()),
        pa.field("graph_replays", pa.int32()),  # torch.cuda.CUDAGraph.replay calls inside the call
        # tokens emitted (accepted + bonus) read from the return value
        pa.field("accept_len", pa.float64()),
        pa.field("ok", pa.bool_()),  # False when the wrapped call raised
        pa.field("target", pa.string()),  # module:Qualname that was wrapped
        # the row's place in nesting order on this rank (store/placement.py `nest`), and the
        # `inst` of the outermost range holding it (itself at depth 0); null in stores merged
        # before merge wrote them (the analyzers then derive them)
        pa.field("inst", pa.int64()),
        pa.field("top", pa.int64()),
    ]
)

# cycles: one row a speculative cycle on a rank.
CYCLES = pa.schema(
    [
        pa.field("cycle", pa.int64()),
        pa.field("start_ns", pa.int64()),
        pa.field("end_ns", pa.int64()),
        # tokens emitted in the cycle (pooled over the requests that drafted: 1 + accepted /
        # drafts), null when unknown
        pa.field("accept_len", pa.float64()),
        # "cycle_target", "cycle_annotation", "starts_with:<phase>"
        pa.field("source", pa.string()),
        # the step's counts when the map read each request's (tracekit/store/acceptance.py);
        # null otherwise, and in stores written before they existed
        pa.field("drafts", pa.int64()),  # requests that drafted
        pa.field("drafted_tokens", pa.int64()),
        pa.field("accepted_tokens", pa.float64()),
        pa.field("requests", pa.int64()),  # requests that emitted tokens in the step
        pa.field("accepted_per_pos", pa.list_(pa.int64())),  # requests accepted at position p
    ]
)

# counters: NVML samples (and Kineto counters if ever kept). Partitioned by the rank that used the
# GPU when known (from the manifests), else by the GPU index.
COUNTERS = pa.schema(
    [
        pa.field("gpu", pa.int32()),  # NVML device index on its host
        pa.field("host", pa.string()),
        pa.field("metric", _dict_str),  # sm_clock_mhz, mem_clock_mhz, power_w, temperature_c,
        # pcie_gen, pcie_width, throttle_reasons, gpu_util_pct, mem_util_pct
        pa.field("ts_ns", pa.int64()),
        pa.field("value", pa.float64()),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "events": EVENTS,
    "manifests": MANIFESTS,
    "phases": PHASES,
    "cycles": CYCLES,
    "counters": COUNTERS,
}


def _time_columns(schema: pa.Schema) -> tuple[str, ...]:
    """A table's absolute timestamps: its `*_ns` columns but durations (`dur_ns`)."""
    return tuple(f.name for f in schema if f.name.endswith("_ns") and f.name != "dur_ns")


# The time columns of each table (moved together when a part's clock is corrected).
TIME_COLUMNS: dict[str, tuple[str, ...]] = {name: _time_columns(s) for name, s in TABLES.items()}
