"""Which allreduce implementation a communication kernel belongs to.

The table is data (`analyzers/data/allreduce_impl.toml`); users add entries with their own TOML
file, tried before the built-in ones. Names that look like communication but match no entry are
labelled `unknown` (and still count as allreduce time), never silently called compute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import InputError

UNKNOWN = "unknown"
_DETAIL_GROUPS = ("coll", "algo", "proto", "dtype")


def _load_toml(text: str, source: str) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{source}: not valid TOML ({exc}); fix the file's syntax"
        raise InputError(msg) from exc
    return data


@dataclass(frozen=True)
class ImplRule:
    family: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class ImplTable:
    """An ordered list of rules plus the regex for communication-looking names."""

    rules: tuple[ImplRule, ...]
    unknown_comm: re.Pattern[str]

    def classify(self, name: str, *, rocm: bool = False) -> str | None:
        """The implementation label of `name`, `unknown` for unmatched communication-looking
        names, None for everything else (compute)."""
        for rule in self.rules:
            m = rule.pattern.search(name)
            if m is None:
                continue
            family = "rccl" if rocm and rule.family == "nccl" else rule.family
            groups = m.groupdict()
            details = []
            for g in _DETAIL_GROUPS:
                v = groups.get(g)
                if not v:
                    continue
                if g == "coll" and v.lower() == "allreduce":
                    continue
                details.append(v)
            return f"{family}:{'/'.join(details)}" if details else family
        if self.unknown_comm.search(name):
            return UNKNOWN
        return None

    def with_rules(self, extra: ImplTable) -> ImplTable:
        return ImplTable(rules=extra.rules + self.rules, unknown_comm=self.unknown_comm)


def parse_impl_table(text: str, source: str) -> ImplTable:
    data = _load_toml(text, source)
    rules = []
    for i, entry in enumerate(data.get("impl", [])):
        family = entry.get("family")
        pattern = entry.get("pattern")
        if not isinstance(family, str) or not isinstance(pattern, str):
            msg = f"{source}: [[impl]] entry {i + 1} needs string `family` and `pattern` keys"
            raise InputError(msg)
        try:
            rules.append(ImplRule(family, re.compile(pattern)))
        except re.error as exc:
            msg = f"{source}: [[impl]] entry {i + 1} (`{family}`): bad regex {pattern!r} ({exc})"
            raise InputError(msg) from exc
    unknown = data.get("unknown_comm", r"(?!x)x")
    return ImplTable(rules=tuple(rules), unknown_comm=re.compile(unknown))


@lru_cache(maxsize=1)
def builtin_table() -> ImplTable:
    text = resources.files("tracekit.analyzers").joinpath("data/allreduce_impl.toml").read_text()
    return parse_impl_table(text, "allreduce_impl.toml")


def load_impl_table(extra: Path | None = None) -> ImplTable:
    """The built-in table, with `extra`'s entries (if given) tried first."""
    table = builtin_table()
    if extra is None:
        return table
    path = Path(extra)
    if not path.is_file():
        msg = f"{path}: no such implementation table; pass a TOML file with [[impl]] entries"
        raise InputError(msg)
    return table.with_rules(parse_impl_table(path.read_text(), str(path)))


def implementation_labels(intervals: pl.DataFrame) -> pl.DataFrame:
    """`inst`, `allreduce_impl`: one label a phase instance from the labels of its
    communication intervals (`comm`), as one polars expression (no Python call a row).

    Distinct non-empty labels sorted and joined with `+`; the generic `c10d` entry point is
    dropped when something more specific ran too."""
    label = pl.col("label").cast(pl.String)
    labels = pl.col("_labels")
    specific = labels.list.eval(pl.element().filter(pl.element() != "c10d"))
    return (
        intervals.filter(pl.col("comm") & pl.col("inst").is_not_null())
        .group_by("inst")
        .agg(label.filter(label.is_not_null() & (label != "")).unique().sort().alias("_labels"))
        .with_columns(
            pl.when(labels.list.len() > 1).then(specific).otherwise(labels).alias("_labels")
        )
        .with_columns(
            pl.when(labels.list.len() > 0)
            .then(labels.list.join("+"))
            .otherwise(pl.lit(None, dtype=pl.String))
            .alias("allreduce_impl")
        )
        .drop("_labels")
    )
