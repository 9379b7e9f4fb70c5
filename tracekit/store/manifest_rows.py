"""The `manifests` rows (section, key, value) of one Kineto trace.

Sections follow `tracekit.store.schema.MANIFESTS`: `trace` (file of origin, time base, every
other top-level key as JSON), `distributed` (distributedInfo), `device` (the GPU this rank's
kernels ran on, from deviceProperties), `versions` (CUDA / CUPTI / HIP / roctracer / NCCL).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from tracekit._version import __version__
from tracekit.store.kineto import BatchStats, RawTrace, base_time_ns, meta_value
from tracekit.store.ranks import RankSource

Row = tuple[str, str, str]

_VERSION_KEYS = {
    "cuda_runtime_version": "cuda_runtime",
    "cuda_driver_version": "cuda_driver",
    "cupti_version": "cupti",
    "hip_runtime_version": "hip_runtime",
    "hip_driver_version": "hip_driver",
    "roctracer_version": "roctracer",
}
_DEVICE_KEYS = {
    "name": "name",
    "totalGlobalMem": "total_global_mem",
    "numSms": "num_sms",
    "uuid": "uuid",
    "id": "index",
}
_SKIP_TOP = {
    "traceEvents",
    "deviceProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "traceName",
    "schemaVersion",
    "displayTimeUnit",
    *_VERSION_KEYS,
}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def manifest_rows(
    trace: RawTrace, *, rank: int, rank_source: RankSource, stats: BatchStats
) -> list[Row]:
    rows: list[Row] = []
    base = base_time_ns(trace)
    rows += [
        ("trace", "source_file", str(trace.path.resolve())),
        ("trace", "rank", str(rank)),
        ("trace", "rank_source", rank_source),
        ("trace", "time_base", "relative_ns" if base is not None else "absolute_us"),
        ("trace", "events", str(stats.events)),
        ("trace", "salvaged", "true" if trace.salvaged else "false"),
        ("versions", "tracekit", __version__),
    ]
    if base is not None:
        rows.append(("trace", "base_time_ns", str(base)))
    if stats.skipped:
        rows.append(("trace", "events_without_ts", str(stats.skipped)))
    if stats.negative_dur:
        rows.append(("trace", "negative_durations_clamped", str(stats.negative_dur)))
    for key, name in (
        ("traceName", "trace_name"),
        ("schemaVersion", "kineto_schema_version"),
        ("displayTimeUnit", "display_time_unit"),
    ):
        value = meta_value(trace, key)
        if value is not None:
            rows.append(("trace", name, _text(value)))
    for key, name in _VERSION_KEYS.items():
        value = meta_value(trace, key)
        if value is not None:
            rows.append(("versions", name, _text(value)))
    for key in sorted(trace.meta):
        if key in _SKIP_TOP:
            continue
        raw = trace.meta[key]
        if len(raw) > 65536:
            continue
        rows.append(("trace", key, _compact(raw)))

    info = meta_value(trace, "distributedInfo")
    if isinstance(info, dict):
        for key, value in info.items():
            rows.append(("distributed", str(key), _text(value)))
        nccl = info.get("nccl_version")
        if nccl is not None:
            rows.append(("versions", "nccl", _text(nccl)))

    props = meta_value(trace, "deviceProperties")
    if isinstance(props, list) and props:
        rows.extend(_device_rows(props, stats))
    return rows


def _device_rows(props: list[Any], stats: BatchStats) -> list[Row]:
    used = max(stats.devices, key=lambda d: stats.devices[d]) if stats.devices else None
    chosen: dict[str, Any] | None = None
    for p in props:
        if isinstance(p, dict) and (used is None or p.get("id") == used):
            chosen = p
            break
    if chosen is None and isinstance(props[0], dict):
        chosen = props[0]
    rows: list[Row] = [("device", "properties", _text(props)), ("device", "count", str(len(props)))]
    if chosen is not None:
        for key, name in _DEVICE_KEYS.items():
            if key in chosen:
                rows.append(("device", name, _text(chosen[key])))
        if "computeMajor" in chosen and "computeMinor" in chosen:
            rows.append(
                (
                    "device",
                    "compute_capability",
                    f"{chosen['computeMajor']}.{chosen['computeMinor']}",
                )
            )
    return rows


def _compact(raw: msgspec.Raw) -> str:
    try:
        return _text(msgspec.json.decode(raw))
    except msgspec.DecodeError:
        return bytes(raw).decode("utf-8", "replace")
