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
from typing import Any

from tracekit.collectors.accept import AcceptRule, accept_rules, bind_accept
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


def load(path: Path | str, *, source: str | None = None) -> PhaseMap:
    """Read and check a phase map file; errors name the file (or `source`: the file it is a
    copy of) and what to fix."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"{path}: cannot read the phase map ({exc.strerror or exc}); check the path given to `--phases`"
        raise CollectorError(msg) from exc
    return parse(text, source=source or str(path), path=path)


def load_builtin(name: str) -> PhaseMap:
    return load(builtin_path(name))


def _accept(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _ACCEPT_RE.match(value):
        msg = f'{where}: `accept_len` must be an attribute path such as "accept_len" or "output.accept_len", got {value!r}'
        raise CollectorError(msg)
    return value


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
    """Check a phase map's text (`source` names it in errors: one line, what to fix)."""
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
    phases = _phases(data.get("phase", []), source)
    return PhaseMap(
        name=name,
        phases=phases,
        cycle=_cycle(data.get("cycle", {}), {ph.name for ph in phases}, source),
        package=package if isinstance(package, str) else None,
        path=path,
        text=text,
        components=_components(data.get("component", []), source),
    )


def _phases(raw_phases: object, source: str) -> tuple[PhaseSpec, ...]:
    """The `[[phase]]` tables: each a new name, at least one target, one accept rule form."""
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
        accept = accept_rules(entry.get("accept"), f"{where} ({pname}) key `accept`")
        if accept and entry.get("accept_len") is not None:
            msg = f"{where} ({pname}): both `accept_len` and `accept`; keep one"
            raise CollectorError(msg)
        phases.append(
            PhaseSpec(pname, targets, _accept(entry.get("accept_len"), where), accept=accept)
        )
    return tuple(phases)


def _cycle(raw_cycle: object, seen: set[str], source: str) -> CycleSpec:
    """The `[cycle]` table, checked against the map's phase names `seen`."""
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
        accept=accept_rules(raw_cycle.get("accept"), f"{source}: [cycle] key `accept`"),
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
    return cycle


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
