"""The demo's target model: causal KV-cached decoding and KV cache rollback."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tracekit.demo.config import preset  # noqa: E402
from tracekit.demo.parallel import TensorParallelGroup  # noqa: E402
from tracekit.demo.target_model import KVCache, TargetModel  # noqa: E402

CFG = preset("tiny").replace(max_seq_len=64)
TOKENS = [5, 17, 900, 3, 3, 256, 1000, 42, 7, 611]


@pytest.fixture(scope="module")
def target() -> TargetModel:
    torch.set_num_threads(1)
    return TargetModel(CFG, TensorParallelGroup())


def _forward(model: TargetModel, cache: KVCache, tokens: list[int], start: int, kv_len: int | None):
    ids = torch.tensor(tokens)
    pos = torch.arange(start, start + len(tokens))
    with torch.inference_mode():
        return model(ids, pos, cache, kv_len)


def test_incremental_decode_matches_full_forward(target: TargetModel) -> None:
    # GIVEN the logits of the whole sequence in one forward
    _, full = _forward(target, target.new_cache(), TOKENS, 0, len(TOKENS))
    # WHEN the same tokens go through one at a time, reading earlier ones from the cache
    cache = target.new_cache()
    steps = [_forward(target, cache, [tok], i, i + 1)[1][0] for i, tok in enumerate(TOKENS)]
    # THEN position i sees the same context either way
    torch.testing.assert_close(torch.stack(steps), full, rtol=1e-4, atol=1e-4)


def test_masked_full_cache_equals_sliced_cache(target: TargetModel) -> None:
    # GIVEN the eager path (cache sliced to kv_len) and the graph path (whole cache, masked)
    _, sliced = _forward(target, target.new_cache(), TOKENS, 0, len(TOKENS))
    # WHEN
    _, masked = _forward(target, target.new_cache(), TOKENS, 0, None)
    # THEN
    torch.testing.assert_close(masked, sliced, rtol=1e-5, atol=1e-5)


def test_kv_rollback_forgets_rejected_positions(target: TargetModel) -> None:
    # GIVEN a cache holding 6 tokens of the sequence and then 3 wrong ones
    cache = target.new_cache()
    _forward(target, cache, TOKENS[:6], 0, 6)
    _forward(target, cache, [1, 2, 999], 6, 9)
    # WHEN it is rolled back to 6 positions and the right continuation runs
    cache.truncate(6)
    _, rolled = _forward(target, cache, TOKENS[6:], 6, len(TOKENS))
    # THEN the logits are those of a cache that never saw the wrong tokens
    _, clean = _forward(target, target.new_cache(), TOKENS, 0, len(TOKENS))
    torch.testing.assert_close(rolled, clean[6:], rtol=1e-4, atol=1e-4)
    # AND the stale entries are still in the buffer (rollback is the length, not a copy)
    assert cache.length == 6


def test_kv_rollback_of_a_shorter_continuation_under_the_graph_path(target: TargetModel) -> None:
    # GIVEN stale entries beyond the rolled-back length, and the unsliced (graph) attention path
    cache = target.new_cache()
    _forward(target, cache, [*TOKENS[:4], 11, 12, 13, 14], 0, 8)
    cache.truncate(4)
    # WHEN two real tokens follow, attending over the whole masked cache
    _, rolled = _forward(target, cache, TOKENS[4:6], 4, None)
    # THEN positions 6..7 (still stale) do not leak into the result
    _, clean = _forward(target, target.new_cache(), TOKENS[:6], 0, 6)
    torch.testing.assert_close(rolled, clean[4:6], rtol=1e-4, atol=1e-4)


def test_truncate_refuses_out_of_range() -> None:
    cache = KVCache.allocate(1, 8, 1, 4, torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match="cannot truncate"):
        cache.truncate(9)


def test_weights_do_not_depend_on_build_order() -> None:
    # GIVEN two models of one seed, one with an extra layer (which rescales the residual
    # branches, not the other tensors)
    a = TargetModel(CFG, TensorParallelGroup())
    b = TargetModel(CFG.replace(num_layers=3), TensorParallelGroup())
    # THEN their shared tensors are equal, and another seed differs
    torch.testing.assert_close(a.embed, b.embed)
    torch.testing.assert_close(a.layers[1].mlp.gate_up.weight, b.layers[1].mlp.gate_up.weight)
    c = TargetModel(CFG.replace(seed=1), TensorParallelGroup())
    assert not torch.equal(a.embed, c.embed)


def test_config_refuses_an_uneven_split() -> None:
    from tracekit.errors import InputError

    with pytest.raises(InputError, match="cannot be split over 3 ranks"):
        CFG.check(3)
