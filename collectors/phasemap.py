"""Phase maps: which functions to wrap, under which phase name (TOML; DESIGN.md "Phase maps").

```toml
[adapter]
name = "demo"
package = "tracekit.demo"          # server package: its version/git state go into the manifest

[[phase]]
name = "verify"
targets = ["pkg.module:Class.method", "pkg.other:function"]
accept_len = "accept_len"          # optional: attribute path read from the return value
# or, from any program (docs/phasemaps.md): where this phase's call shows a cycle's tokens
# accept = { from = "arg:input_ids", value = "shape[-1]", kind = "delta" }

[cycle]
targets = ["pkg.module:Worker.step"]   # one outermost call = one cycle; or:
starts_with = "draft"                  # a cycle starts at each outermost `draft` phase
accept_len = "accept_len"              # optional, read from the cycle target's return value
require = "draft"                      # optional: a cycle-target call without this phase inside
                                       # (e.g. a prefill batch) is not a cycle
```

Built-in maps ship in `phasemaps/<name>.toml`. Only the standard library is imported here: this
module is loaded inside every instrumented process.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from tracekit.errors import CollectorError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PHASEMAP_DIR = Path(__file__).resolve().parent / "phasemaps"
_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*$")
_ACCEPT_RE = re.compile(r"^(?:[A-Za-z_]\w*|\d+)(?:\.(?:[A-Za-z_]\w*|\d+))*$")
_PHASE_NAME_RE = re.compile(r"^[A-Za-z_][\w.\-]*$")


@dataclass(frozen=True)
class Target:
    """One wrapped callable: `module:Qualname.attr`."""

    module: str
    qualname: str

    @classmethod
    def parse(cls, text: str, *, source: str = "phase map") -> Target:
        if not isinstance(text, str) or not _TARGET_RE.match(text):
            msg = (
                f"{source}: target {text!r} is not of the form `package.module:Qualname.attr`; "
                "fix the phase map"
            )
            raise CollectorError(msg)
        module, qualname = text.split(":", 1)
        return cls(module, qualname)

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"


AcceptKind = Literal["count", "delta"]
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
    tokens (DEFINITIONS.md "acceptance rules"). `text` is the rule as written, for messages.
    """

    source: AcceptFrom
    steps: tuple[Step, ...]
    kind: AcceptKind = "count"
    arg: str | None = None
    text: str = ""
    where: str = ""


@dataclass(frozen=True)
class PhaseSpec:
    name: str
    targets: tuple[Target, ...]
    accept_len: str | None = None
    accept: tuple[AcceptRule, ...] = ()  # alternatives: the first one a target can give


@dataclass(frozen=True)
class CycleSpec:
    targets: tuple[Target, ...] = ()
    starts_with: str | None = None
    accept_len: str | None = None
    require: str | None = None
    accept: tuple[AcceptRule, ...] = ()

    @property
    def source(self) -> str:
        if self.targets:
            return "cycle_target"
        if self.starts_with:
            return f"starts_with:{self.starts_with}"
        return "none"


@dataclass(frozen=True)
class Site:
    """What a wrapper does for one target: record a phase, count a cycle, or both."""

    target: Target
    phase: str | None = None
    accept_len: str | None = None
    cycle: bool = False
    cycle_accept_len: str | None = None
    starts_cycle: bool = False  # phase is the map's `starts_with` phase
    accept: tuple[AcceptRule, ...] = ()
    cycle_accept: tuple[AcceptRule, ...] = ()
    # (phase rule, cycle rule) bound to the wrapped function's signature (`bind_site`)
    bound: tuple[Any, Any] = field(default=(None, None), compare=False, hash=False)

    @property
    def needs_args(self) -> bool:
        """A rule reads an argument: the wrapper hands the call's arguments to `exit`."""
        return any(b is not None and b.needs_args for b in self.bound)


@dataclass(frozen=True)
class ComponentSpec:
    """A component whose class decides what runs (vLLM's drafter, its communicator): read at
    the first call of `at` in each process from `value` (collectors/components.py)."""

    name: str
    at: Target
    value: str


@dataclass(frozen=True)
class PhaseMap:
    name: str
    phases: tuple[PhaseSpec, ...]
    cycle: CycleSpec
    package: str | None = None
    path: Path | None = None
    text: str = ""
    components: tuple[ComponentSpec, ...] = ()

    @property
    def phase_names(self) -> list[str]:
        return [p.name for p in self.phases]

    def targets(self) -> list[Target]:
        """Every distinct target, in map order."""
        seen: dict[Target, None] = {}
        for ph in self.phases:
            for t in ph.targets:
                seen.setdefault(t, None)
        for t in self.cycle.targets:
            seen.setdefault(t, None)
        return list(seen)

    def sites(self) -> dict[str, list[Site]]:
        """module name -> the sites to install when it is imported."""
        by_target: dict[Target, Site] = {}
        for ph in self.phases:
            for t in ph.targets:
                if t in by_target and by_target[t].phase is not None:
                    continue  # first phase naming a target wins
                by_target[t] = Site(
                    target=t,
                    phase=ph.name,
                    accept_len=ph.accept_len,
                    starts_cycle=(ph.name == self.cycle.starts_with),
                    accept=ph.accept,
                )
        for t in self.cycle.targets:
            base = by_target.get(t, Site(target=t))
            by_target[t] = Site(
                target=t,
                phase=base.phase,
                accept_len=base.accept_len,
                cycle=True,
                cycle_accept_len=self.cycle.accept_len,
                starts_cycle=False,
                accept=base.accept,
                cycle_accept=self.cycle.accept,
            )
        out: dict[str, list[Site]] = {}
        for t, site in by_target.items():
            out.setdefault(t.module, []).append(site)
        return out


def builtin_names() -> list[str]:
    return sorted(p.stem for p in PHASEMAP_DIR.glob("*.toml"))


def builtin_path(name: str) -> Path:
    path = PHASEMAP_DIR / f"{name}.toml"
    if not path.is_file():
        msg = (
            f"unknown adapter `{name}`; built-in adapters are {', '.join(builtin_names())}, "
            "or pass your own map with `--phases FILE.toml`"
        )
        raise CollectorError(msg)
    return path


def load(path: Path | str) -> PhaseMap:
    """Read and check a phase map file; errors name the file and what to fix."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"{path}: cannot read the phase map ({exc.strerror or exc}); check the path given to `--phases`"
        raise CollectorError(msg) from exc
    return parse(text, source=str(path), path=path)


def load_builtin(name: str) -> PhaseMap:
    return load(builtin_path(name))


def _accept(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _ACCEPT_RE.match(value):
        msg = f'{where}: `accept_len` must be an attribute path such as "accept_len" or "output.accept_len", got {value!r}'
        raise CollectorError(msg)
    return value


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


def _accept_rule(value: object, where: str) -> AcceptRule:
    if not isinstance(value, dict):
        msg = f'{where}: must be a table such as {{ from = "return", value = "accept_len" }}'
        raise CollectorError(msg)
    extra = set(value) - {"from", "value", "kind"}
    if extra:
        msg = f"{where}: unknown key(s) {sorted(extra)}; allowed: from, value, kind"
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
    if kind not in ("count", "delta"):
        msg = f'{where}: `kind = {kind!r}`; use "count" (tokens of the cycle) or "delta" (growth of a length)'
        raise CollectorError(msg)
    text = value.get("value", "")
    if not isinstance(text, str):
        msg = f'{where}: `value` must be a string path such as "shape[-1]", got {text!r}'
        raise CollectorError(msg)
    steps = parse_value(text, where)
    shown = f"from={src} value={text or '(itself)'} kind={kind}"
    return AcceptRule(source, steps, kind, arg, shown, where)


def _accept_rules(value: object, where: str) -> tuple[AcceptRule, ...]:
    """`accept = {...}`, or a list of such tables: alternatives, the first one a target's
    signature can give is used for that target."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not items:
        return ()
    rules = tuple(
        _accept_rule(v, f"{where}[{i}]" if isinstance(value, list) else where)
        for i, v in enumerate(items)
    )
    if len({(r.kind, r.source if r.kind == "delta" else "") for r in rules}) > 1:
        msg = (
            f"{where}: alternatives must share `kind` (and, for delta, the kind of `from`: all "
            "return or all arg); split them or make them agree"
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


def bind_site(site: Site, fn: Any) -> Site:
    """`site` with its accept rules bound to `fn`; says once on stderr when a rule (the only
    one its phase gives) names an argument `fn` does not have."""
    if not site.accept and not site.cycle_accept:
        return site
    bound = (bind_accept(site.accept, fn), bind_accept(site.cycle_accept, fn))
    for rules, b in zip((site.accept, site.cycle_accept), bound, strict=True):
        if rules and b is None and len(rules) == 1:
            sys.stderr.write(
                f"tracekit: {site.target} has no argument `{rules[0].arg}` ({rules[0].where}); "
                "acceptance is not read from this target\n"
            )
    return replace(site, bound=bound)


def evaluate(steps: tuple[Step, ...], obj: Any) -> Any:
    """Apply parsed `value` steps to `obj` (attribute or mapping key, index, each, len)."""
    for i, (kind, arg) in enumerate(steps):
        if kind == "each":
            if not isinstance(obj, (list, tuple)):
                msg = f"`[*]` needs a list or tuple, got {type(obj).__name__}"
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


def _targets(value: object, where: str) -> tuple[Target, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        msg = f'{where}: `targets` must be a list of "module:Qualname" strings'
        raise CollectorError(msg)
    return tuple(Target.parse(v, source=where) for v in value)


def parse(text: str, *, source: str = "<phase map>", path: Path | None = None) -> PhaseMap:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{source}: not valid TOML ({exc}); fix the phase map"
        raise CollectorError(msg) from exc
    known = {"adapter", "phase", "cycle", "component"}
    unknown = set(data) - known
    if unknown:
        msg = f"{source}: unknown section(s) {sorted(unknown)}; a phase map has [adapter], [[phase]], [cycle] and [[component]]"
        raise CollectorError(msg)
    adapter = data.get("adapter", {})
    if not isinstance(adapter, dict):
        msg = f"{source}: [adapter] must be a table"
        raise CollectorError(msg)
    name = str(adapter.get("name") or (path.stem if path else "custom"))
    package = adapter.get("package")
    raw_phases = data.get("phase", [])
    if not isinstance(raw_phases, list) or not raw_phases:
        msg = f"{source}: no [[phase]] entries; add at least one `[[phase]]` with `name` and `targets`"
        raise CollectorError(msg)
    phases: list[PhaseSpec] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw_phases):
        where = f"{source}: [[phase]] #{i + 1}"
        if not isinstance(entry, dict):
            msg = f"{where}: must be a table"
            raise CollectorError(msg)
        extra = set(entry) - {"name", "targets", "accept_len", "accept"}
        if extra:
            msg = f"{where}: unknown key(s) {sorted(extra)}; allowed: name, targets, accept_len, accept"
            raise CollectorError(msg)
        pname = entry.get("name")
        if not isinstance(pname, str) or not _PHASE_NAME_RE.match(pname):
            msg = f'{where}: `name` must be a phase name such as "draft", got {pname!r}'
            raise CollectorError(msg)
        if pname in seen:
            msg = f"{where}: phase `{pname}` appears twice; list all its targets in one [[phase]]"
            raise CollectorError(msg)
        seen.add(pname)
        targets = _targets(entry.get("targets"), f"{where} ({pname})")
        if not targets:
            msg = f'{where} ({pname}): `targets` is empty; list at least one "module:Qualname"'
            raise CollectorError(msg)
        accept = _accept_rules(entry.get("accept"), f"{where} ({pname}) key `accept`")
        if accept and entry.get("accept_len") is not None:
            msg = f"{where} ({pname}): both `accept_len` and `accept`; keep one"
            raise CollectorError(msg)
        phases.append(
            PhaseSpec(pname, targets, _accept(entry.get("accept_len"), where), accept=accept)
        )
    raw_cycle = data.get("cycle", {})
    if not isinstance(raw_cycle, dict):
        msg = f"{source}: [cycle] must be a table"
        raise CollectorError(msg)
    extra = set(raw_cycle) - {"targets", "starts_with", "accept_len", "require", "accept"}
    if extra:
        msg = f"{source}: [cycle] has unknown key(s) {sorted(extra)}; allowed: targets, starts_with, accept_len, accept, require"
        raise CollectorError(msg)
    starts_with = raw_cycle.get("starts_with")
    require = raw_cycle.get("require")
    for key, val in (("starts_with", starts_with), ("require", require)):
        if val is not None and val not in seen:
            msg = f"{source}: [cycle] {key} = {val!r} is not a phase of this map ({sorted(seen)})"
            raise CollectorError(msg)
    cycle = CycleSpec(
        targets=_targets(raw_cycle.get("targets"), f"{source}: [cycle]"),
        starts_with=starts_with,
        accept_len=_accept(raw_cycle.get("accept_len"), f"{source}: [cycle]"),
        require=require,
        accept=_accept_rules(raw_cycle.get("accept"), f"{source}: [cycle] key `accept`"),
    )
    if cycle.accept and not cycle.targets:
        msg = (
            f"{source}: [cycle] key `accept` needs cycle `targets` (the calls it is read from); "
            "with `starts_with`, put `accept` on a [[phase]]"
        )
        raise CollectorError(msg)
    if cycle.targets and cycle.starts_with:
        msg = f"{source}: [cycle] has both `targets` and `starts_with`; keep one"
        raise CollectorError(msg)
    # DESIGN: failing a cycle function, a cycle starts at each top-level draft phase.
    if not cycle.targets and not cycle.starts_with and "draft" in seen:
        cycle = CycleSpec(starts_with="draft", accept_len=cycle.accept_len, accept=cycle.accept)
    return PhaseMap(
        name=name,
        phases=tuple(phases),
        cycle=cycle,
        package=package if isinstance(package, str) else None,
        path=path,
        text=text,
        components=_components(data.get("component", []), source),
    )


_COMPONENT_VALUE_RE = re.compile(
    r"^(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|[A-Za-z_][\w.]*:[A-Za-z_]\w*\(\)(?:\.[A-Za-z_]\w*)*)$"
)


def _components(raw: object, source: str) -> tuple[ComponentSpec, ...]:
    if not isinstance(raw, list):
        msg = f"{source}: [[component]] must be an array of tables"
        raise CollectorError(msg)
    out: list[ComponentSpec] = []
    for i, entry in enumerate(raw):
        where = f"{source}: [[component]] #{i + 1}"
        if not isinstance(entry, dict) or set(entry) != {"name", "at", "value"}:
            msg = f'{where}: needs exactly `name`, `at` (a "module:Qualname" target) and `value`'
            raise CollectorError(msg)
        value = entry["value"]
        if not isinstance(value, str) or not _COMPONENT_VALUE_RE.match(value):
            msg = (
                f'{where}: `value` must be an argument path such as "self.drafter" or a call '
                f'such as "pkg.module:get_group().communicator", got {value!r}'
            )
            raise CollectorError(msg)
        name = entry["name"]
        if not isinstance(name, str) or not _PHASE_NAME_RE.match(name):
            msg = f'{where}: `name` must be a name such as "drafter", got {name!r}'
            raise CollectorError(msg)
        out.append(ComponentSpec(name, Target.parse(entry["at"], source=where), value))
    return tuple(out)


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


def all_builtin() -> dict[str, PhaseMap]:
    return {n: load_builtin(n) for n in builtin_names()}


__all__ = [
    "AcceptRule",
    "BoundAccept",
    "ComponentSpec",
    "CycleSpec",
    "PhaseMap",
    "PhaseSpec",
    "Site",
    "Target",
    "bind_accept",
    "bind_site",
    "builtin_names",
    "builtin_path",
    "load",
    "load_builtin",
    "parse",
    "parse_value",
    "read_attr_path",
]
