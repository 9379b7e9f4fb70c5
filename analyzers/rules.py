"""The annotation rule table: which `user_annotation` names are phases or cycles.

tracekit's own ranges are `tracekit/<phase>` and `tracekit/cycle`; the built-in table
(`analyzers/data/annotation_rules.toml`) maps SGLang's and vLLM's spans; users add rules with a
TOML file of the same format, tried first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from tracekit.analyzers.allreduce import _load_toml
from tracekit.errors import InputError

CYCLE = "\x00cycle"  # the phase value of a range that marks a cycle
_OWN = re.compile(r"tracekit/(?P<phase>[A-Za-z0-9_.\-]+)")


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    phase: str  # CYCLE for cycle markers


@dataclass(frozen=True)
class RuleTable:
    rules: tuple[Rule, ...]

    def match(self, name: str) -> str | None:
        """The phase a range named `name` stands for (CYCLE for a cycle), or None."""
        m = _OWN.fullmatch(name)
        if m is not None:
            phase = m.group("phase")
            return CYCLE if phase == "cycle" else phase
        for rule in self.rules:
            if rule.pattern.fullmatch(name):
                return rule.phase
        return None

    def with_rules(self, extra: RuleTable) -> RuleTable:
        return RuleTable(rules=extra.rules + self.rules)


def parse_rules(text: str, source: str) -> RuleTable:
    data = _load_toml(text, source)
    rules = []
    for i, entry in enumerate(data.get("rule", [])):
        pattern = entry.get("pattern")
        phase = CYCLE if entry.get("cycle") is True else entry.get("phase")
        if not isinstance(pattern, str) or not isinstance(phase, str) or not phase:
            msg = (
                f"{source}: [[rule]] entry {i + 1} needs a string `pattern` and either "
                '`phase = "NAME"` or `cycle = true`'
            )
            raise InputError(msg)
        try:
            rules.append(Rule(re.compile(pattern), phase))
        except re.error as exc:
            msg = f"{source}: [[rule]] entry {i + 1}: bad regex {pattern!r} ({exc})"
            raise InputError(msg) from exc
    return RuleTable(rules=tuple(rules))


@lru_cache(maxsize=1)
def builtin_rules() -> RuleTable:
    text = resources.files("tracekit.analyzers").joinpath("data/annotation_rules.toml").read_text()
    return parse_rules(text, "annotation_rules.toml")


def load_rules(extra: Path | None = None) -> RuleTable:
    """The built-in rules, with `extra`'s rules (if given) tried first."""
    table = builtin_rules()
    if extra is None:
        return table
    path = Path(extra)
    if not path.is_file():
        msg = f"{path}: no such rule file; pass a TOML file with [[rule]] entries"
        raise InputError(msg)
    return table.with_rules(parse_rules(path.read_text(), str(path)))
