"""`tracekit sweep`: its plan (commands, knobs, environment) and its one-line errors; no runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.cli._sweep_plan import (
    ENV_ACCEPT,
    ENV_RESULT,
    parse_accept,
    plan_runs,
    vllm_with_acceptance,
)
from tracekit.errors import InputError


def test_parse_accept_sorts_and_refuses_nonsense() -> None:
    assert parse_accept("2.5, 1,1.5,") == [1.0, 1.5, 2.5]
    for bad, match in [("1,x", "'x' is not a number"), ("0.5", "below 1"), ("2,2", "repeated")]:
        with pytest.raises(InputError, match=match):
            parse_accept(bad)


def test_vllm_knob_sets_synthetic_rejection_sampling_in_the_speculative_config() -> None:
    spec = '{"method": "eagle", "num_speculative_tokens": 3, "synthetic_acceptance_rates": [1]}'
    argv = ["vllm-x", "--model", "m", "--speculative-config", spec]
    out = vllm_with_acceptance(argv, 2.5)
    assert out[:4] == argv[:4]
    assert json.loads(out[4]) == {
        "method": "eagle",
        "num_speculative_tokens": 3,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.5,
    }
    inline = vllm_with_acceptance(["x", "--speculative-config=" + spec], 1.5)
    flag, _, text = inline[1].partition("=")
    assert flag == "--speculative-config"
    assert json.loads(text)["synthetic_acceptance_length"] == 1.5


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["python", "serve.py"], "no --speculative-config JSON"),
        (["x", "--speculative-config", "{nope"], "is not JSON"),
        (["x", "--speculative-config", "[1]"], "must be a JSON object"),
    ],
)
def test_vllm_knob_errors(argv: list[str], match: str) -> None:
    with pytest.raises(InputError, match=match):
        vllm_with_acceptance(argv, 2.0)


def test_plan_sets_the_knob_per_point_and_clears_it_for_the_baseline(tmp_path: Path) -> None:
    plans = plan_runs(
        knob="sglang",
        accepts=[1.5, 3.0],
        command=["srv", "--out", "{result}", "--note", "acc={accept}"],
        baseline_command=["srv", "--plain", "--out", "{result}"],
        results=tmp_path,
    )
    assert [p.name for p in plans] == ["baseline", "accept-1.5", "accept-3"]
    base, p15, p3 = plans
    assert base.command == ["srv", "--plain", "--out", str(tmp_path / "baseline.json")]
    assert "SGLANG_SIMULATE_ACC_LEN" in base.unset
    assert base.env == {ENV_RESULT: str(tmp_path / "baseline.json")}
    assert p15.env == {
        "SGLANG_SIMULATE_ACC_LEN": "1.5",
        ENV_ACCEPT: "1.5",
        ENV_RESULT: str(tmp_path / "accept-1.5.json"),
    }
    assert p3.command == ["srv", "--out", str(tmp_path / "accept-3.json"), "--note", "acc=3"]


def test_plan_vllm_without_a_hole_patches_the_config(tmp_path: Path) -> None:
    (p,) = plan_runs(
        knob="vllm",
        accepts=[2.0],
        command=["x", "--speculative-config", '{"method": "ngram"}'],
        baseline_command=None,
        results=tmp_path,
    )
    assert json.loads(p.command[2])["rejection_sample_method"] == "synthetic"
    assert "SGLANG_SIMULATE_ACC_LEN" not in p.env


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--accept", "2"], "no command"),
        (["--accept", "2", "--demo", "--", "python", "x.py"], "drop the command"),
        (["--accept", "2,5", "--demo"], "above K+1 = 4"),
        (["--accept", "2", "--demo", "--ranks", "3"], "cannot be split over 3 ranks"),
        (["--accept", "2", "--", "python", "x.py"], "which knob holds acceptance"),
        (["--accept", "2", "--knob", "none", "--", "python", "x.py"], "put {accept} in"),
        (["--accept", "2", "--knob", "vllm", "--", "python", "x.py"], "no --speculative-config"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], match: str) -> None:
    res = CliRunner().invoke(cli, ["sweep", "--out", str(tmp_path), *args])
    assert res.exit_code == 2, res.output
    assert match in res.output
    assert "Traceback" not in res.output
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_help_has_an_example() -> None:
    res = CliRunner().invoke(cli, ["sweep", "--help"])
    assert res.exit_code == 0
    assert "tracekit sweep --demo --accept 1,1.5,2,2.5,3" in res.output
