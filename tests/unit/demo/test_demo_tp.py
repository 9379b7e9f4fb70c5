"""Tensor parallelism: 4 spawned gloo ranks compute what one process computes."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tracekit.demo.config import preset  # noqa: E402
from tracekit.demo.draft import DraftHead  # noqa: E402
from tracekit.demo.parallel import TensorParallelGroup  # noqa: E402
from tracekit.demo.ranks import spawn_ranks  # noqa: E402
from tracekit.demo.speculative import SpeculativeDecoder  # noqa: E402
from tracekit.demo.target_model import TargetModel  # noqa: E402

CFG = preset("tiny").replace(max_seq_len=128)
TOKENS = [5, 17, 900, 3, 3, 256, 1000, 42, 7, 611, 64, 128]


def _compute(group: TensorParallelGroup) -> dict[str, object]:
    target = TargetModel(CFG, group)
    head = DraftHead(CFG, group, target)
    n = len(TOKENS)
    with torch.inference_mode():
        hidden, logits = target(torch.tensor(TOKENS), torch.arange(n), target.new_cache(), n)
        drafted = head(hidden, torch.tensor([*TOKENS[1:], 0]), torch.arange(n), head.new_cache(), n)
    spec = SpeculativeDecoder(target, head, draft_tokens=3)
    spec.prefill(TOKENS)
    accept = [spec.step().accept_len for _ in range(10)]
    return {
        "logits": logits.clone(),
        "draft": drafted.clone(),
        "output": spec.output,
        "accept": accept,
        "shard_rows": target.layers[0].attn.qkv.weight.shape[0],
    }


def _rank(rank: int, out_dir: str) -> None:
    torch.save(_compute(TensorParallelGroup.from_default_group()), Path(out_dir) / f"{rank}.pt")


@pytest.mark.slow
def test_tp4_logits_equal_tp1(tmp_path: Path) -> None:
    # GIVEN the model in one process
    torch.set_num_threads(1)
    single = _compute(TensorParallelGroup())
    # WHEN 4 gloo ranks each hold a quarter of every split weight
    spawn_ranks(_rank, 4, (str(tmp_path),), backend="gloo")
    ranks = [torch.load(tmp_path / f"{r}.pt") for r in range(4)]
    # THEN each rank holds a quarter of the QKV rows and every rank gets the TP=1 logits
    assert ranks[0]["shard_rows"] * 4 == single["shard_rows"]
    for got in ranks:
        torch.testing.assert_close(got["logits"], single["logits"], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got["draft"], single["draft"], rtol=1e-4, atol=1e-4)
        # AND speculative decoding makes the same tokens and cycles on every rank
        assert got["output"] == single["output"]
        assert got["accept"] == single["accept"]


def _fail_on_rank_1(rank: int) -> None:
    if rank == 1:
        msg = "rank 1 breaks"
        raise RuntimeError(msg)
    # rank 0 waits in a collective for rank 1, which never comes: it must be terminated
    TensorParallelGroup.from_default_group().all_reduce(torch.zeros(1))


@pytest.mark.slow
def test_a_failing_rank_stops_the_others_and_is_named() -> None:
    from tracekit.errors import RankFailedError

    with pytest.raises(RankFailedError, match=r"rank [01] of 2 exited with code 1"):
        spawn_ranks(_fail_on_rank_1, 2, (), backend="gloo")
