"""EAGLE-style draft head: one decoder layer on (target feature, next token's embedding).

At position i it reads the target's last hidden state h_i (before the final norm) and the
embedding of token i+1, fuses them with a linear layer (`fc`, 2H -> H, replicated), runs one
tensor-parallel decoder layer (two allreduces) and predicts the target's feature h_{i+1}; the
target's final norm and LM head, shared, turn it into the guess for token i+2. Chained drafting
feeds its own predicted feature back in.

The head is built, not trained: `fc` passes the embedding through (plus a little noise) and the
layer's branches are small, so the head models the target's embedding path and not its residual
branches. How often it agrees with the target is set by the target's `divergence`
(docs/demo.md, "Acceptance").
"""

from __future__ import annotations

import torch

from tracekit.demo.config import ModelConfig
from tracekit.demo.parallel import TensorParallelGroup
from tracekit.demo.target_model import DecoderLayer, KVCache, ShardSpec, TargetModel, init_weight

# Scale of the draft layer's own residual branches and of the noise on its fusion layer.
DRAFT_BRANCH_SCALE = 0.05
FC_NOISE = 0.05


class DraftHead(torch.nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        group: TensorParallelGroup,
        target: TargetModel,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        device = torch.device(device)
        h = cfg.hidden_size
        self.cfg, self.group, self.target, self.dtype, self.device = (
            cfg,
            group,
            target,
            dtype,
            device,
        )
        fc = init_weight(cfg, "draft.fc", (h, 2 * h), FC_NOISE * (2 * h) ** -0.5, device)
        fc[:, :h] += torch.eye(h, device=device)
        self.fc = torch.nn.Parameter(fc.to(dtype), requires_grad=False)
        spec = ShardSpec(cfg, group, dtype, device)
        self.layer = DecoderLayer(spec, "draft.layer", DRAFT_BRANCH_SCALE)

    def new_cache(self) -> KVCache:
        return KVCache.allocate(
            1,
            self.cfg.max_seq_len,
            self.cfg.num_kv_heads // self.group.size,
            self.cfg.head_dim,
            self.dtype,
            self.device,
        )

    def forward(
        self,
        features: torch.Tensor,
        ids: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache,
        kv_len: int | None,
    ) -> torch.Tensor:
        """Predicted target features of positions+1, [T, H]."""
        x = torch.cat([self.target.embed_tokens(ids), features], dim=-1)
        x = torch.nn.functional.linear(x, self.fc)
        return self.layer(x, positions, cache, 0, kv_len)  # type: ignore[no-any-return]

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.target.logits(features)
