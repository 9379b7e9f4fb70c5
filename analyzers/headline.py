"""The headline of a diff: a few plain sentences, most important first (analyzers/diff.py
builds the phase and manifest changes they are made from)."""

from __future__ import annotations

from typing import Any


def _ms(v: float) -> str:
    return f"{v:.2f} ms"


def _dominant(counts: dict[str, int]) -> str | None:
    return max(counts, key=lambda k: (counts[k], k)) if counts else None


def headline(
    phases: dict[str, dict[str, Any]],
    manifest: dict[str, list[dict[str, Any]]],
    *,
    env_known: bool,
    command: dict[str, list[str]] | None = None,
    noise: str | None = None,
) -> list[str]:
    """A few plain sentences, most important first (`noise`, what the intervals cover, right
    after the phases')."""
    lines = _significant_lines(phases) + _overall_lines(phases) + ([noise] if noise else [])
    if command is not None:
        lines.append(
            f"The server command changed: `{' '.join(command['a']) or '(nothing)'}` in A, "
            f"`{' '.join(command['b']) or '(nothing)'}` in B."
        )
    return lines + _manifest_lines(manifest, env_known=env_known)


def _significant_lines(phases: dict[str, dict[str, Any]]) -> list[str]:
    """One sentence a significant phase change, with its graph and allreduce changes."""
    lines: list[str] = []
    for name, p in phases.items():
        if not p["significant"]:
            continue
        delta = p["delta_ms"]
        lo, hi = p["ci95_ms"]
        parts = [
            f"{part} {p[f'{part}_delta_ms']:+.2f} ms"
            for part in ("forward", "allreduce", "overhead")
            if p[f"{part}_delta_ms"] is not None and abs(p[f"{part}_delta_ms"]) >= 0.005
        ]
        lines.append(
            f"{name} is {_ms(abs(delta))} {'slower' if delta > 0 else 'faster'} in B "
            f"({_ms(p['a_ms_p50'])} -> {_ms(p['b_ms_p50'])} median, 95% CI {lo:+.2f} to "
            f"{hi:+.2f} ms)" + (f": {', '.join(parts)}." if parts else ".")
        )
        g = p["graph_replayed_frac"]
        if g["a"] is not None and g["b"] is not None and abs(g["a"] - g["b"]) >= 0.1:
            lines.append(
                f"{name} replayed CUDA graphs in {g['a']:.0%} of instances in A and "
                f"{g['b']:.0%} in B."
            )
        ia, ib = _dominant(p["allreduce_impl"]["a"]), _dominant(p["allreduce_impl"]["b"])
        if ia != ib:
            lines.append(f"{name}'s allreduce changed from {ia or 'none'} to {ib or 'none'}.")
    return lines


def _overall_lines(phases: dict[str, dict[str, Any]]) -> list[str]:
    """No phase in common, no significant change, phases of one run only."""
    lines: list[str] = []
    common = [n for n, p in phases.items() if p["a_count"] and p["b_count"]]
    if phases and not common:
        only_a = [n for n, p in phases.items() if p["a_count"]]
        only_b = [n for n, p in phases.items() if p["b_count"]]
        lines.append(
            f"A and B have no phase in common: A ran {', '.join(only_a) or 'none'}, "
            f"B ran {', '.join(only_b) or 'none'} (for plain against speculative decoding, "
            "`tracekit breakeven --baseline A --spec B` compares them)."
        )
    elif not any(p["significant"] for p in phases.values()):
        both = [(n, p) for n, p in phases.items() if p["delta_ms"] is not None]
        biggest = both[0] if both else None
        if biggest:
            lines.append(
                f"No phase changed significantly (largest change: {biggest[0]} "
                f"{biggest[1]['delta_ms']:+.2f} ms)."
            )
        else:
            lines.append("No phase changed significantly.")
    for name, p in phases.items():
        if common and (p["a_count"] == 0 or p["b_count"] == 0):
            only, n = ("B", p["b_count"]) if p["a_count"] == 0 else ("A", p["a_count"])
            lines.append(f"{name} appears only in {only} ({n} instances).")
    return lines


def _changes(entries: list[dict[str, Any]]) -> str:
    """`name a -> b, ...` of manifest changes."""
    return ", ".join(f"{e['name']} {e['a']} -> {e['b']}" for e in entries)


def _changed(what: str, entries: list[dict[str, Any]]) -> str:
    return f"{what}: {_changes(entries)}."


def _manifest_lines(manifest: dict[str, list[dict[str, Any]]], *, env_known: bool) -> list[str]:
    """Packages, versions, NCCL and other environment, GPU medians that changed."""
    lines: list[str] = []
    pkgs = manifest.get("packages", [])
    if pkgs:
        shown = _changes(pkgs[:4])
        more = f" and {len(pkgs) - 4} more" if len(pkgs) > 4 else ""
        lines.append(f"Packages and commits changed: {shown}{more}.")
    vers = manifest.get("versions", [])
    if vers:
        lines.append(_changed("Versions changed", vers))
    env = manifest.get("env", [])
    nccl = [e for e in env if e["name"].startswith("NCCL_")]
    if nccl:
        lines.append(_changed("NCCL environment changed", nccl))
    elif env_known:
        lines.append("No NCCL_* environment variable changed.")
    other_env = [e for e in env if not e["name"].startswith("NCCL_")]
    if other_env:
        lines.append(
            f"{len(other_env)} other environment variable(s) changed (see `manifest.env`)."
        )
    gpu = manifest.get("gpu", [])
    if gpu:
        lines.append(_changed("GPU medians changed", gpu))
    return lines
