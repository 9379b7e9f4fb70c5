"""The accept rule language of phase maps: where a call shows a cycle's tokens.

`accept = { from = "return" | "arg:NAME", value = "PATH", kind = "count" | "delta" }` in a
`[[phase]]` or `[cycle]` table (docs/phasemaps.md, DEFINITIONS.md "acceptance rules"): parsed
here into an `AcceptRule` (nothing is executed: the value is a path of attributes, indexes,
`[*]` and `len(...)`), bound to a target's signature (`BoundAccept`, `bind_accept`) when its wrapper is made,
and evaluated on the call's return value or argument at the phase's exit. `read_attr_path`
reads the older `accept_len = "a.b"` form. Runs inside the server: standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from tracekit.errors import CollectorError

AcceptKind = Literal["count", "delta", "drafted"]
AcceptState = Literal["before", "after"]
AcceptFrom = Literal["return", "arg"]
# One step of an accept `value` path: ("attr", name), ("index", n), ("each", None), or
# ("len", None) (the length of what the steps before it reached).
Step = tuple[str, "str | int | None"]
_STEP_RE = re.compile(r"\.?([A-Za-z_]\w*)|\[(-?\d+)\]|\[\*\]")
_ARG_RE = re.compile(r"^arg:([A-Za-z_]\w*)$")


@dataclass(frozen=True)
class AcceptRule:
    """Where a call shows a cycle's tokens (`accept = {...}` in a phase map).

    `source` "return": the call's return value; "arg": its argument `arg` (by name, or by
    position from the function's signature). `steps` is the parsed `value` path, applied to that
    object; `kind` "count": the value is the cycle's tokens (a list or a CPU tensor: its mean);
    "delta": the value is a length whose growth from one cycle's call to the next is the
    tokens (DEFINITIONS.md "acceptance rules"); "drafted": the value is the draft tokens of each
    request of the step (a list; a request with 0 drafted none), so acceptance is pooled over
    the requests that drafted. `state` (delta only): the length is the state "before" the
    call's cycle (default for an argument) or "after" it (default for a return value); a cycle
    with both gets after - before. `text` is the rule as written, for messages.
    """

    source: AcceptFrom
    steps: tuple[Step, ...]
    kind: AcceptKind = "count"
    arg: str | None = None
    text: str = ""
    where: str = ""
    state: AcceptState = "before"


def parse_value(text: str, where: str) -> tuple[Step, ...]:
    """Parse an accept `value` path: `.attr` (or a bare first name), `[int]`, `[*]` (each
    element of a list or tuple), wrapped in `len(...)` for a length. Nothing is executed."""
    body = text.strip()
    steps: list[Step] = []
    wrap_len = False
    if body.startswith("len(") and body.endswith(")"):
        body, wrap_len = body[4:-1].strip(), True
    pos = 0
    while pos < len(body):
        m = _STEP_RE.match(body, pos)
        if m is None or (m.group(1) and m.group(0)[0] != "." and pos > 0):
            msg = (
                f'{where}: `value = "{text}"` is not a path (at {body[pos:]!r}); use `.attr`, '
                '`[int]`, `[*]` and `len(...)`, e.g. "shape[-1]" or "len(tokens[*])"'
            )
            raise CollectorError(msg)
        if m.group(1):
            steps.append(("attr", m.group(1)))
        elif m.group(2) is not None:
            steps.append(("index", int(m.group(2))))
        else:
            steps.append(("each", None))
        pos = m.end()
    if wrap_len:
        steps.append(("len", None))
    return tuple(steps)


def accept_rule(value: object, where: str) -> AcceptRule:
    if not isinstance(value, dict):
        msg = f'{where}: must be a table such as {{ from = "return", value = "accept_len" }}'
        raise CollectorError(msg)
    extra = set(value) - {"from", "value", "kind", "state"}
    if extra:
        msg = f"{where}: unknown key(s) {sorted(extra)}; allowed: from, value, kind, state"
        raise CollectorError(msg)
    src = value.get("from", "return")
    arg = None
    m = _ARG_RE.match(src) if isinstance(src, str) else None
    if m is not None:
        source: AcceptFrom = "arg"
        arg = m.group(1)
    elif src == "return":
        source = "return"
    else:
        msg = f'{where}: `from = {src!r}`; use "return" or "arg:NAME" (an argument of the target)'
        raise CollectorError(msg)
    kind = value.get("kind", "count")
    if kind not in ("count", "delta", "drafted"):
        msg = (
            f'{where}: `kind = {kind!r}`; use "count" (tokens of the cycle), "delta" (growth of '
            'a length) or "drafted" (draft tokens of each request)'
        )
        raise CollectorError(msg)
    state = _state(value.get("state"), kind, source, where)
    text = value.get("value", "")
    if not isinstance(text, str):
        msg = f'{where}: `value` must be a string path such as "shape[-1]", got {text!r}'
        raise CollectorError(msg)
    steps = parse_value(text, where)
    shown = f"from={src} value={text or '(itself)'} kind={kind}"
    if "state" in value:
        shown += f" state={state}"
    return AcceptRule(source, steps, kind, arg, shown, where, state)


def _state(value: object, kind: str, source: AcceptFrom, where: str) -> AcceptState:
    """A delta rule's `state`: what its length is, before or after the call's cycle."""
    if value is None:
        return "before" if source == "arg" else "after"
    if kind != "delta":
        msg = f'{where}: `state` is for kind = "delta" only; remove it'
        raise CollectorError(msg)
    if value not in ("before", "after"):
        msg = (
            f'{where}: `state = {value!r}`; use "before" (the length before the cycle) or '
            '"after" (the length after it)'
        )
        raise CollectorError(msg)
    return "before" if value == "before" else "after"


def accept_rules(value: object, where: str) -> tuple[AcceptRule, ...]:
    """`accept = {...}`, or a list of such tables: alternatives, the first one a target's
    signature can give is used for that target."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not items:
        return ()
    rules = tuple(
        accept_rule(v, f"{where}[{i}]" if isinstance(value, list) else where)
        for i, v in enumerate(items)
    )
    if len({(r.kind, r.state if r.kind == "delta" else "") for r in rules}) > 1:
        msg = (
            f"{where}: alternatives must share `kind` (and, for delta, the `state` their "
            "lengths give: all before or all after the cycle); split them or make them agree"
        )
        raise CollectorError(msg)
    return rules


@dataclass(frozen=True)
class BoundAccept:
    """An accept rule bound to one target's signature: where to find its source object."""

    rule: AcceptRule
    position: int = -1  # the argument's index in the positional arguments, -1: keyword only
    default: Any = None
    has_default: bool = False

    @property
    def needs_args(self) -> bool:
        return self.rule.source == "arg"

    def source(self, result: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
        rule = self.rule
        if rule.source == "return":
            return result
        name = rule.arg
        if name in kwargs:
            return kwargs[name]
        if 0 <= self.position < len(args):
            return args[self.position]
        if self.has_default:
            return self.default
        msg = f"argument `{name}` was not passed"
        raise LookupError(msg)

    def read(self, result: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
        return evaluate(self.rule.steps, self.source(result, args, kwargs))


def evaluate(steps: tuple[Step, ...], obj: Any) -> Any:
    """Apply parsed `value` steps to `obj` (attribute or mapping key, index, each, len)."""
    for i, (kind, arg) in enumerate(steps):
        if kind == "each":
            if isinstance(obj, dict):
                obj = list(obj.values())  # a mapping: each of its values
            if not isinstance(obj, (list, tuple)):
                msg = f"`[*]` needs a list, tuple or dict, got {type(obj).__name__}"
                raise TypeError(msg)
            rest = steps[i + 1 :]
            return [evaluate(rest, x) for x in obj]
        if kind == "attr":
            obj = obj[arg] if isinstance(obj, dict) else getattr(obj, str(arg))
        elif kind == "index":
            obj = obj[arg]
        else:
            obj = len(obj)
    return obj


def bind_accept(rules: tuple[AcceptRule, ...], fn: Any) -> BoundAccept | None:
    """The first rule `fn` can give (a return value always; an argument its signature has)."""
    import inspect

    if not rules:
        return None
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    by_name = {p.name: p for p in params}
    takes_kwargs = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)
    for rule in rules:
        if rule.source == "return":
            return BoundAccept(rule)
        p = by_name.get(str(rule.arg))
        if p is None and not takes_kwargs:
            continue
        pos = positional.index(p.name) if p is not None and p.name in positional else -1
        default = p.default if p is not None else inspect.Parameter.empty
        has_default = default is not inspect.Parameter.empty
        return BoundAccept(rule, pos, default if has_default else None, has_default)
    return None


def read_attr_path(value: object, path: str) -> object:
    """Follow `a.b.0.c` on `value` (names: attributes or mapping keys; digits: indexes)."""
    for part in path.split("."):
        if part.isdigit():
            value = value[int(part)]  # type: ignore[index]
        elif isinstance(value, dict):
            value = value[part]
        else:
            value = getattr(value, part)
    return value
