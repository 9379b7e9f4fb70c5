"""Speculative decoding: greedy equivalence with plain decoding, acceptance, rollback."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from tracekit.demo.config import preset  # noqa: E402
from tracekit.demo.draft import DraftHead  # noqa: E402
from tracekit.demo.parallel import TensorParallelGroup  # noqa: E402
from tracekit.demo.speculative import (  # noqa: E402
    BaselineDecoder,
    DraftResult,
    SpeculativeDecoder,
)
from tracekit.demo.target_model import TargetModel  # noqa: E402

CFG = preset("tiny")


def _models(cfg=CFG) -> tuple[TargetModel, DraftHead]:
    torch.set_num_threads(1)
    group = TensorParallelGroup()
    target = TargetModel(cfg, group)
    return target, DraftHead(cfg, group, target)


@pytest.fixture(scope="module")
def models() -> tuple[TargetModel, DraftHead]:
    return _models()


def _prompt(seed: int, n: int = 12) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(CFG.vocab_size) for _ in range(n)]


def _baseline(target: TargetModel, prompt: list[int], tokens: int) -> list[int]:
    dec = BaselineDecoder(target)
    dec.prefill(prompt)
    for _ in range(tokens - 1):
        dec.step()
    return dec.output


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_speculative_output_equals_baseline(models, k: int, seed: int) -> None:
    # GIVEN one prompt, decoded plainly for 60 tokens
    target, head = models
    prompt = _prompt(seed)
    expected = _baseline(target, prompt, 60)
    # WHEN the speculative decoder produces at least as many
    spec = SpeculativeDecoder(target, head, draft_tokens=k)
    spec.prefill(prompt)
    lengths = []
    while len(spec.output) < 60:
        lengths.append(spec.step().accept_len)
    # THEN token for token the same, with a cycle emitting between 1 and K+1 tokens
    assert spec.output[:60] == expected
    assert all(1 <= n <= k + 1 for n in lengths)
    assert sum(lengths) + 1 == len(spec.output)


def test_verify_accepts_all_correct_drafts_and_adds_the_bonus(models) -> None:
    # GIVEN the target's own next 4 tokens
    target, head = models
    prompt = _prompt(7)
    truth = _baseline(target, prompt, 5)  # x_n and the 4 after it
    spec = SpeculativeDecoder(target, head, draft_tokens=3)
    spec.prefill(prompt)
    n = spec.seq_len
    spec.draft()
    # WHEN verify sees drafts equal to the truth
    result = spec.verify(DraftResult(tokens=torch.tensor(truth[1:4])))
    # THEN all 3 are accepted plus the bonus, and the cache keeps x_n and the 3 drafts
    assert result.accept_len == 4
    assert result.tokens == truth[1:5]
    assert spec.seq_len == n + 4
    assert result.hidden.shape == (4, CFG.hidden_size)


def test_verify_rejects_from_the_first_wrong_draft_and_rolls_back(models) -> None:
    # GIVEN drafts whose second token is wrong
    target, head = models
    prompt = _prompt(8)
    truth = _baseline(target, prompt, 5)
    wrong = (truth[2] + 1) % CFG.vocab_size
    spec = SpeculativeDecoder(target, head, draft_tokens=3)
    spec.prefill(prompt)
    n = spec.seq_len
    spec.draft()
    # WHEN verified
    result = spec.verify(DraftResult(tokens=torch.tensor([truth[1], wrong, truth[3]])))
    spec.draft_extend(result)
    # THEN one draft is accepted, the target's token replaces the wrong one, the target cache
    # is rolled back to x_n + 1 accepted token, the draft cache follows it
    assert result.accept_len == 2
    assert result.tokens == [truth[1], truth[2]]
    assert spec.seq_len == n + 2
    assert spec.draft_cache.length == n + 2
    # AND decoding goes on exactly as plain decoding would
    while len(spec.output) < 30:
        spec.step()
    assert spec.output[:30] == _baseline(target, prompt, 30)


def test_acceptance_at_defaults_is_between_1_5_and_3_5(models) -> None:
    # GIVEN the defaults (K=3, divergence 0.3), several requests as the server makes them
    target, head = models
    spec = SpeculativeDecoder(target, head, draft_tokens=3)
    lengths = []
    for seed in range(6):
        spec.prefill(_prompt(100 + seed, 16))
        lengths += [spec.step().accept_len for _ in range(15)]
    # THEN the mean acceptance length is in the range
    mean = sum(lengths) / len(lengths)
    assert 1.5 <= mean <= 3.5, mean


def test_divergence_tunes_acceptance() -> None:
    # GIVEN a target the draft head models exactly (0) and one it models badly (1.0)
    def mean_accept(divergence: float) -> float:
        target, head = _models(CFG.replace(divergence=divergence))
        spec = SpeculativeDecoder(target, head, draft_tokens=3)
        spec.prefill(_prompt(3, 16))
        lengths = [spec.step().accept_len for _ in range(20)]
        return sum(lengths) / len(lengths)

    # THEN acceptance falls as divergence grows
    close, far = mean_accept(0.0), mean_accept(1.0)
    assert close > 3.0
    assert far < 1.6
    assert close > far


def test_step_returns_accept_len_for_the_cycle_record(models) -> None:
    target, head = models
    spec = SpeculativeDecoder(target, head)
    spec.prefill(_prompt(4))
    result = spec.step()
    assert isinstance(result.accept_len, int)
    assert result.accept_len == len(result.tokens)
    base = BaselineDecoder(target)
    base.prefill(_prompt(4))
    assert base.step().accept_len == 1


def test_bad_decoder_options_are_refused(models) -> None:
    target, head = models
    with pytest.raises(ValueError, match="at least 1"):
        SpeculativeDecoder(target, head, draft_tokens=0)
    with pytest.raises(ValueError, match="needs CUDA graphs"):
        SpeculativeDecoder(target, head, verify_mode="graph")
    with pytest.raises(ValueError, match="at least one token"):
        SpeculativeDecoder(target, head).prefill([])
