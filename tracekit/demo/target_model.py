"""A Llama-style decoder split Megatron-style over a `TensorParallelGroup`.

RMSNorm, rotary position embeddings, grouped-query attention over a static KV cache, SwiGLU MLP.
QKV and gate/up are column-parallel, the attention output and down projections row-parallel (one
allreduce each), so a layer costs two allreduces. Embedding and LM head are replicated.

Weights are random but deterministic: every tensor is drawn in full from its own seeded generator
and then sliced, so the model is the same whatever the number of ranks (TP=1 and TP=4 give the
same logits).

Attention reads the cache through a position mask, never through a Python length, so the same
code runs eagerly (`kv_len` given: the cache is sliced to it) and inside a captured CUDA graph
(`kv_len=None`: the whole static cache, masked). Rolling the cache back is setting its length:
entries past it are never read before they are overwritten.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch

from tracekit.demo.config import ModelConfig
from tracekit.demo.parallel import ColumnParallelLinear, RowParallelLinear, TensorParallelGroup


def init_weight(
    cfg: ModelConfig, name: str, shape: tuple[int, ...], std: float, device: torch.device
) -> torch.Tensor:
    """A float32 N(0, std) tensor, the same for one (seed, name) whatever else is built."""
    gen = torch.Generator(device=device)
    gen.manual_seed(cfg.seed * 1_000_003 + zlib.crc32(name.encode()))
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * std


class RMSNorm(torch.nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(
            torch.ones(size, dtype=dtype, device=device), requires_grad=False
        )
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


class Rotary(torch.nn.Module):
    """Rotary embeddings (the rotate-half form of Llama), tables indexed by a position tensor."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        d = cfg.head_dim
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        pos = torch.arange(cfg.max_seq_len, dtype=torch.float64)
        angles = torch.outer(pos, inv)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos().to(device=device, dtype=dtype), persistent=False)
        self.register_buffer("sin", angles.sin().to(device=device, dtype=dtype), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: [T, heads, d]
        cos = self.cos.index_select(0, positions).unsqueeze(1)
        sin = self.sin.index_select(0, positions).unsqueeze(1)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


@dataclass
class KVCache:
    """Static per-layer key/value buffers of one sequence; `length` positions are valid."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    length: int = 0
    max_len: int = field(init=False)

    def __post_init__(self) -> None:
        self.max_len = self.keys[0].shape[0] if self.keys else 0

    @classmethod
    def allocate(
        cls,
        layers: int,
        max_len: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> KVCache:
        shape = (max_len, kv_heads, head_dim)
        keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        return cls(keys, values)

    def truncate(self, length: int) -> None:
        """Roll back to the first `length` positions (rejected draft tokens are forgotten)."""
        if not 0 <= length <= self.max_len:
            msg = f"cannot truncate a KV cache of {self.max_len} positions to {length}"
            raise ValueError(msg)
        self.length = length


@dataclass(frozen=True)
class ShardSpec:
    """What each layer of one rank's model is built from: the model's config, the
    tensor-parallel group that shards it, and the weights' dtype and device."""

    cfg: ModelConfig
    group: TensorParallelGroup
    dtype: torch.dtype
    device: torch.device


class Attention(torch.nn.Module):
    key_pos: torch.Tensor

    def __init__(self, spec: ShardSpec, prefix: str, out_std: float) -> None:
        super().__init__()
        cfg, group, dtype, device = spec.cfg, spec.group, spec.dtype, spec.device
        h, d = cfg.hidden_size, cfg.head_dim
        self.heads = cfg.num_heads // group.size
        self.kv_heads = cfg.num_kv_heads // group.size
        self.head_dim = d
        std = h**-0.5
        q = init_weight(cfg, f"{prefix}.q", (cfg.num_heads * d, h), std, device)
        k = init_weight(cfg, f"{prefix}.k", (cfg.num_kv_heads * d, h), std, device)
        v = init_weight(cfg, f"{prefix}.v", (cfg.num_kv_heads * d, h), std, device)
        qkv = torch.cat([group.shard(q, 0), group.shard(k, 0), group.shard(v, 0)], dim=0)
        self.qkv = ColumnParallelLinear(qkv.to(dtype))
        o = init_weight(cfg, f"{prefix}.o", (h, cfg.num_heads * d), out_std, device)
        self.o = RowParallelLinear(group.shard(o, 1).to(dtype), group)
        self.rotary = Rotary(cfg, dtype, device)
        self.register_buffer(
            "key_pos", torch.arange(cfg.max_seq_len, device=device), persistent=False
        )

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        kv_len: int | None,
    ) -> torch.Tensor:
        t = x.shape[0]
        d = self.head_dim
        q, k, v = self.qkv(x).split([self.heads * d, self.kv_heads * d, self.kv_heads * d], -1)
        q = self.rotary(q.view(t, self.heads, d), positions)
        k = self.rotary(k.view(t, self.kv_heads, d), positions)
        k_cache.index_copy_(0, positions, k)
        v_cache.index_copy_(0, positions, v.view(t, self.kv_heads, d))
        keys, values, key_pos = k_cache, v_cache, self.key_pos
        if kv_len is not None:
            keys, values, key_pos = keys[:kv_len], values[:kv_len], key_pos[:kv_len]
        mask = key_pos.unsqueeze(0) <= positions.unsqueeze(1)  # [T, S]: causal over the cache
        groups = self.heads // self.kv_heads
        kh = keys.transpose(0, 1).repeat_interleave(groups, dim=0)  # [heads, S, d]
        vh = values.transpose(0, 1).repeat_interleave(groups, dim=0)
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), kh, vh, attn_mask=mask
        )  # [heads, T, d]
        result: torch.Tensor = self.o(out.transpose(0, 1).reshape(t, self.heads * d))
        return result


class MLP(torch.nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), gate/up column-parallel, down row-parallel."""

    def __init__(self, spec: ShardSpec, prefix: str, out_std: float) -> None:
        super().__init__()
        cfg, group, dtype, device = spec.cfg, spec.group, spec.dtype, spec.device
        h, i = cfg.hidden_size, cfg.intermediate_size
        gate = init_weight(cfg, f"{prefix}.gate", (i, h), h**-0.5, device)
        up = init_weight(cfg, f"{prefix}.up", (i, h), h**-0.5, device)
        self.width = i // group.size
        self.gate_up = ColumnParallelLinear(
            torch.cat([group.shard(gate, 0), group.shard(up, 0)], dim=0).to(dtype)
        )
        down = init_weight(cfg, f"{prefix}.down", (h, i), out_std, device)
        self.down = RowParallelLinear(group.shard(down, 1).to(dtype), group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).split([self.width, self.width], dim=-1)
        result: torch.Tensor = self.down(torch.nn.functional.silu(gate) * up)
        return result


class DecoderLayer(torch.nn.Module):
    """Pre-norm Llama layer: x + attn(norm(x)), then x + mlp(norm(x)). Two allreduces."""

    def __init__(self, spec: ShardSpec, prefix: str, branch_scale: float) -> None:
        super().__init__()
        cfg = spec.cfg
        self.input_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps, spec.dtype, spec.device)
        self.attn = Attention(spec, f"{prefix}.attn", branch_scale * cfg.hidden_size**-0.5)
        self.post_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps, spec.dtype, spec.device)
        # silu(g) * u has about half the magnitude of a unit Gaussian: make up for it.
        self.mlp = MLP(spec, f"{prefix}.mlp", 2.0 * branch_scale * cfg.intermediate_size**-0.5)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache,
        layer: int,
        kv_len: int | None,
    ) -> torch.Tensor:
        """The layer on `x`, with its keys and values at `layer` in `cache`."""
        k_cache, v_cache = cache.keys[layer], cache.values[layer]
        x = x + self.attn(self.input_norm(x), positions, k_cache, v_cache, kv_len)
        out: torch.Tensor = x + self.mlp(self.post_norm(x))
        return out


class TargetModel(torch.nn.Module):
    """The target LLM: embedding, `num_layers` decoder layers, final norm, LM head."""

    def __init__(
        self,
        cfg: ModelConfig,
        group: TensorParallelGroup,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        cfg.check(group.size)
        device = torch.device(device)
        self.cfg, self.group, self.dtype, self.device = cfg, group, dtype, device
        h = cfg.hidden_size
        self.embed = init_weight(cfg, "embed", (cfg.vocab_size, h), 1.0, device).to(dtype)
        # Residual branches scaled so that all layers together perturb the embedding by
        # about `divergence` (per component) whatever the depth.
        branch = cfg.divergence / (2 * cfg.num_layers) ** 0.5
        spec = ShardSpec(cfg, group, dtype, device)
        self.layers = torch.nn.ModuleList(
            DecoderLayer(spec, f"layers.{i}", branch) for i in range(cfg.num_layers)
        )
        self.norm = RMSNorm(h, cfg.rms_eps, dtype, device)
        self.lm_head = init_weight(cfg, "lm_head", (cfg.vocab_size, h), h**-0.5, device).to(dtype)

    def new_cache(self) -> KVCache:
        return KVCache.allocate(
            len(self.layers),
            self.cfg.max_seq_len,
            self.cfg.num_kv_heads // self.group.size,
            self.cfg.head_dim,
            self.dtype,
            self.device,
        )

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed.index_select(0, ids)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head on the final norm of `hidden` (shared with the draft head), in float32."""
        return torch.nn.functional.linear(self.norm(hidden), self.lm_head).float()

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, cache: KVCache, kv_len: int | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden states before the final norm (the draft head's features) and logits."""
        x = self.embed_tokens(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, cache, i, kv_len)
        return x, self.logits(x)
