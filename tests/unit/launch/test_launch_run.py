"""`launch()` end to end on a tiny command (no server, no NVML, no merge): the run directory,
run.json at the start and the end (with the map's cycle rule for merge), the exit code, the
one-line warnings; and the cycle rule as the launcher writes it from a phase map."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tracekit.collectors import phasemap as pm
from tracekit.errors import CollectorError
from tracekit.launch.launcher import launch
from tracekit.launch.options import LaunchOptions
from tracekit.launch.runjson import cycle_rule
from tracekit.launch.supervise import Supervision
from tracekit.store.raw.cycle_rule import parse_cycle_rule

MAP = """
[adapter]
name = "tiny"
[[phase]]
name = "draft"
targets = ["tk_never_imported_mod:Worker.draft"]
[[phase]]
name = "verify"
targets = ["tk_never_imported_mod:Worker.verify"]
accept = { from = "arg:input_ids", value = "shape[-1]", kind = "delta" }
[cycle]
targets = ["tk_never_imported_mod:Worker.step"]
require = "draft"
"""


def _opts(tmp_path: Path, code: str, **kw: object) -> LaunchOptions:
    phases = tmp_path / "map.toml"
    phases.write_text(MAP)
    return LaunchOptions(
        command=[sys.executable, "-c", code],
        phasemap_path=phases,
        out=tmp_path / "runs",
        name="t",
        merge=False,
        nvml=False,
        grace_s=5.0,
        **kw,  # type: ignore[arg-type]
    )


def test_cycle_rule_is_the_maps_rule_as_merge_reads_it(tmp_path: Path) -> None:
    rule = cycle_rule(pm.parse(MAP))
    assert rule == {
        "targets": ["tk_never_imported_mod:Worker.step"],
        "starts_with": None,
        "require": "draft",
        "delta_phases": {"verify": "before"},  # the length before the cycle (state)
        "cycle_delta": None,
    }
    assert parse_cycle_rule(json.loads(json.dumps(rule)), tmp_path / "run.json") == rule


def test_a_launch_writes_run_json_and_returns_the_commands_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRACEKIT_DISABLE", raising=False)
    said: list[str] = []
    # WHEN a command that imports none of the map's modules exits with code 3
    res = launch(_opts(tmp_path, "import sys; sys.exit(3)"), warn=said.append)
    # THEN the run directory is the one asked for, with the map copied into raw/
    assert res.run_dir == tmp_path / "runs" / "t"
    assert (res.run_dir / "raw" / "phasemap.toml").read_text() == MAP
    # and tracekit returns the command's code; run.json says how it ended, with the rule
    assert res.exit_code == 3
    run = json.loads((res.run_dir / "run.json").read_text())
    assert run == res.run_manifest | {"start_ns": run["start_ns"], "end_ns": run["end_ns"]}
    assert (run["status"], run["exit_code"], run["returncode"]) == ("finished", 3, 3)
    assert run["adapter"] == "tiny"
    assert run["cycle_rule"]["require"] == "draft"
    assert run["cycle_rule"]["delta_phases"] == {"verify": "before"}
    assert run["signals_forwarded"] == []
    assert run["killed_after_grace"] is False
    assert run["targets"]["patched"] == []
    assert len(run["targets"]["module_never_imported"]) == 3
    # and the warnings are one line each: the package is not here, the command's exit status
    # first, saying it is why nothing was recorded (not a second "nothing was recorded" line)
    assert all("\n" not in w for w in said)
    assert any("tk_never_imported_mod not found" in w for w in said)
    failed = [w for w in said if w.startswith("the command exited with status 3")]
    assert len(failed) == 1, said
    assert "that is why nothing was recorded" in failed[0]
    assert not any(w.startswith("nothing was recorded") for w in said)
    assert res.merge_result is None  # merge=False


def test_a_command_that_cannot_start_leaves_no_run_behind(tmp_path: Path) -> None:
    opts = _opts(tmp_path, "")
    opts.command = ["tk-no-such-program-here"]
    with pytest.raises(CollectorError, match="command not found"):
        launch(opts, warn=lambda m: None)
    assert not (tmp_path / "runs").exists()


def test_a_command_that_fails_to_exec_leaves_no_run_behind(tmp_path: Path) -> None:
    # found on PATH and executable, but its interpreter does not exist: Popen raises
    prog = tmp_path / "bin" / "tk-bad-interpreter"
    prog.parent.mkdir()
    prog.write_text("#!/nonexistent/interpreter\n")
    prog.chmod(0o755)
    opts = _opts(tmp_path, "")
    opts.command = [str(prog)]
    with pytest.raises(CollectorError, match="cannot start"):
        launch(opts, warn=lambda m: None)
    assert list((tmp_path / "runs").iterdir()) == []


@pytest.mark.parametrize(
    ("kw", "match"), [({"mode": "fast"}, "--mode 'fast'"), ({"command": []}, "no command")]
)
def test_bad_options_are_one_line_errors(tmp_path: Path, kw: dict[str, object], match: str) -> None:
    opts = _opts(tmp_path, "")
    for k, v in kw.items():
        setattr(opts, k, v)
    with pytest.raises(CollectorError, match=match):
        launch(opts, warn=lambda m: None)


@pytest.mark.parametrize(("returncode", "exit_code"), [(0, 0), (3, 3), (-15, 143), (-9, 137)])
def test_exit_code_of_a_signal_is_128_plus_n(returncode: int, exit_code: int) -> None:
    assert Supervision(returncode=returncode).exit_code == exit_code
