"""Held acceptance (`--simulate-accept-len`): the requested mean, real tokens, same work a cycle."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tracekit.demo.config import preset  # noqa: E402
from tracekit.demo.draft import DraftHead  # noqa: E402
from tracekit.demo.options import SIMULATE_ENV, parse_args  # noqa: E402
from tracekit.demo.parallel import TensorParallelGroup  # noqa: E402
from tracekit.demo.speculative import AcceptSchedule, SpeculativeDecoder  # noqa: E402
from tracekit.demo.target_model import TargetModel  # noqa: E402
from tracekit.errors import InputError  # noqa: E402

CFG = preset("tiny")


@pytest.fixture(scope="module")
def models() -> tuple[TargetModel, DraftHead]:
    torch.set_num_threads(1)
    group = TensorParallelGroup()
    target = TargetModel(CFG, group)
    return target, DraftHead(CFG, group, target)


def _prompt(seed: int, n: int = 12) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(CFG.vocab_size) for _ in range(n)]


@pytest.mark.parametrize(
    ("mean", "k", "expected"),
    [
        # round(c x 2.5) = 3, 5, 8, 10, 13, 15 -> 3, 2, 3, 2, 3, 2
        (2.5, 3, [3, 2, 3, 2, 3, 2]),
        # round(c x 1.25) = 1, 3, 4, 5, 6, 8, 9, 10 -> mean 10/8 = 1.25
        (1.25, 3, [1, 2, 1, 1, 1, 2, 1, 1]),
        (1.0, 3, [1, 1, 1, 1]),
        (4.0, 3, [4, 4, 4]),
        (2.0, 1, [2, 2, 2]),
    ],
)
def test_schedule_known_sequences(mean: float, k: int, expected: list[int]) -> None:
    s = AcceptSchedule(mean, k)
    assert [s.next() for _ in expected] == expected


@pytest.mark.parametrize("mean", [1.0, 1.3, 1.5, 2.0, 2.7, 3.1, 4.0])
def test_schedule_mean_is_within_half_a_token_over_n(mean: float) -> None:
    s = AcceptSchedule(mean, 3)
    got = [s.next() for _ in range(37)]
    assert abs(sum(got) / 37 - mean) <= 0.5 / 37 + 1e-12
    assert set(got) <= {int(mean), -int(-mean // 1)}  # floor and ceil only


@pytest.mark.parametrize("mean", [0.9, 4.01])
def test_schedule_refuses_means_a_cycle_cannot_emit(mean: float) -> None:
    with pytest.raises(ValueError, match=r"outside \[1, 4\]"):
        AcceptSchedule(mean, 3)


@pytest.mark.parametrize("mean", [1.0, 2.25, 3.5])
def test_decoder_emits_the_held_mean_with_real_self_consistent_tokens(models, mean: float) -> None:
    # GIVEN a speculative decoder with acceptance held at `mean` (K=3)
    target, head = models
    dec = SpeculativeDecoder(target, head, draft_tokens=3, simulate_accept_len=mean)
    prompt = _prompt(1)
    dec.prefill(prompt)
    # WHEN it runs 16 cycles
    lengths = [dec.step().accept_len for _ in range(16)]
    # THEN the tokens are round(16 x mean), here exactly 16 x mean
    assert sum(lengths) == 16 * mean
    assert len(dec.output) == 1 + sum(lengths)
    assert all(0 <= t < CFG.vocab_size for t in dec.output)
    # AND the target's cache holds exactly the emitted sequence: a fresh forward over
    # prompt + output gives the same argmax at every cycle's last token as the cycle's bonus
    seq = prompt + dec.output
    n = len(seq) - 1  # the last emitted token is pending (not yet run through the target)
    assert dec.seq_len == n
    cache = target.new_cache()
    with torch.inference_mode():
        _, logits = target(torch.tensor(seq[:n]), torch.arange(n), cache, n)
    greedy = logits.argmax(-1).tolist()
    pos = len(prompt) + 1  # index in seq of the first token a cycle emitted
    for length in lengths:
        bonus = pos + length - 1
        assert seq[bonus] == greedy[bonus - 1]
        pos += length


def test_decoder_counts_what_the_real_check_accepted(models) -> None:
    # GIVEN the same prompt decoded with real and with held acceptance
    target, head = models
    real = SpeculativeDecoder(target, head, draft_tokens=3)
    real.prefill(_prompt(2))
    real_lengths = [real.step().accept_len for _ in range(6)]
    # THEN the real decoder's natural count is its own acceptance
    assert real.natural_accepted == sum(real_lengths) - 6
    held = SpeculativeDecoder(target, head, draft_tokens=3, simulate_accept_len=4.0)
    held.prefill(_prompt(2))
    assert [held.step().accept_len for _ in range(6)] == [4] * 6
    assert 0 <= held.natural_accepted <= 18


def test_option_and_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_args(["--ranks", "1"]).simulate_accept_len is None
    assert parse_args(["--ranks", "1", "--simulate-accept-len", "2.5"]).simulate_accept_len == 2.5
    monkeypatch.setenv(SIMULATE_ENV, "1.75")
    assert parse_args(["--ranks", "1"]).simulate_accept_len == 1.75
    assert parse_args(["--ranks", "1", "--simulate-accept-len", "3"]).simulate_accept_len == 3.0
    # the baseline has no acceptance to hold: the variable does not apply to it
    assert parse_args(["--ranks", "1", "--baseline"]).simulate_accept_len is None
    monkeypatch.setenv(SIMULATE_ENV, "lots")
    with pytest.raises(InputError, match=f"{SIMULATE_ENV}='lots' is not a number"):
        parse_args(["--ranks", "1"])


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--simulate-accept-len", "4.5"], r"outside \[1, 4\]"),
        (["--simulate-accept-len", "0.5"], r"outside \[1, 4\]"),
        (["--draft-tokens", "1", "--simulate-accept-len", "2.5"], r"outside \[1, 2\]"),
        (["--baseline", "--simulate-accept-len", "2"], "drop it with --baseline"),
    ],
)
def test_bad_simulated_acceptance(argv: list[str], match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_args(["--ranks", "1", *argv])


def test_server_two_ranks_holds_the_mean(tmp_path: Path) -> None:
    # GIVEN the demo server on 2 CPU ranks, 8 cycles, acceptance held at 2.5
    result = tmp_path / "r.json"
    cmd = [
        sys.executable, "-m", "tracekit.demo", "--ranks", "2", "--cycles", "8",
        "--simulate-accept-len", "2.5", "--result", str(result), "-q",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr
    # THEN it emitted 8 x 2.5 = 20 tokens and says so, next to what the real check gave
    data = json.loads(result.read_text())
    assert (data["cycles"], data["tokens"], data["accept_len_mean"]) == (8, 20, 2.5)
    assert data["simulate_accept_len"] == 2.5
    assert 1.0 <= data["accept_len_natural_mean"] <= 4.0
