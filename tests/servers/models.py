"""Tiny models for the real-server tests, built here and cached (there is no model hub).

`python -m tests.servers.models [DIR]` builds them; the tests call `ensure_models()`.

- `target/`: a random Llama (4 layers, hidden 128, 4 heads of 32, 2 KV heads so TP 2 splits
  them, vocab 512) with a byte-level BPE tokenizer trained here on a fixed synthetic text. The
  last two layers' output projections are scaled down, so the first two layers dominate the
  residual stream: a draft made of them agrees with the target often, not always.
- `draft/`: a 2-layer Llama with the target's embedding, first two layers, norm and LM head.
- `eagle/`: an EAGLE-1 head in the layout `vllm/model_executor/models/llama_eagle.py` loads: a
  Llama config with one layer (vLLM renames the architecture to `EagleLlamaForCausalLM`),
  weights `fc.weight` [H, 2H] and `layers.0.*` without `input_layernorm` (EAGLE skips it).
- `eagle3/`: an EAGLE-3 head in the layout of `llama_eagle3.py`: `midlayer.*` with a
  [.., 2H] qkv input and `hidden_norm`, `fc.weight` [H, 3H] (three auxiliary hidden states),
  `norm.weight`, `lm_head.weight`.

Heads are random: their acceptance is low, which is what the tests need (cycles with a
mix of accepted and rejected drafts); the test compares tracekit's acceptance with vLLM's own
counters, whatever its value.

Cached under `$TRACEKIT_SERVER_MODELS` or `~/.cache/tracekit-servers/models-v<N>`; a complete
build writes `.complete` last, so an interrupted build is redone.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

BUILD_VERSION = 1
SEED = 1234
VOCAB = 512
HIDDEN = 128
HEADS = 4
KV_HEADS = 2
INTER = 256
LAYERS = 4
MAX_POS = 1024

WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "be",
    "this",
    "from",
    "or",
    "an",
    "are",
    "not",
    "have",
    "but",
    "they",
    "which",
    "one",
    "you",
    "were",
    "all",
    "we",
    "when",
    "there",
    "can",
    "more",
    "if",
    "no",
    "out",
    "so",
    "said",
    "what",
    "up",
    "its",
    "about",
    "into",
    "than",
    "them",
    "only",
    "other",
    "new",
    "some",
    "could",
    "time",
    "these",
    "two",
    "may",
    "then",
    "do",
    "first",
    "any",
    "like",
    "now",
    "my",
    "over",
    "such",
    "our",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "back",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "cycle",
    "draft",
    "verify",
    "token",
    "model",
    "server",
    "rank",
    "kernel",
    "graph",
    "accept",
    "reduce",
    "tensor",
    "parallel",
    "speculative",
    "decode",
    "prefill",
]


def cache_dir() -> Path:
    env = os.environ.get("TRACEKIT_SERVER_MODELS")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "tracekit-servers" / f"models-v{BUILD_VERSION}"


def corpus(lines: int = 4000) -> list[str]:
    """A fixed text (same on every machine): seeded sentences over a small word list."""
    rng = random.Random(SEED)
    out = []
    for _ in range(lines):
        n = rng.randint(6, 18)
        words = [rng.choice(WORDS) for _ in range(n)]
        out.append(" ".join(words).capitalize() + rng.choice([".", ".", "?", "!"]))
    return out


PROMPTS = [
    "The server rank came back with the draft token and the model",
    "Each cycle of speculative decode has a draft, a verify and",
    "A tensor parallel kernel can reduce the time of the graph when",
    "Three people made the first state of the world before they",
]


def build_tokenizer(dest: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "model_max_length": MAX_POS,
                "add_bos_token": False,
                "clean_up_tokenization_spaces": False,
            },
            indent=1,
        )
    )
    (dest / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>"})
    )


def _llama_config(layers: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "float32",
        "attention_bias": False,
        "mlp_bias": False,
    }


def _layer(gen: object, prefix: str, qkv_in: int, *, input_norm: bool) -> dict[str, object]:
    import torch

    g: torch.Generator = gen  # type: ignore[assignment]
    hd = HIDDEN // HEADS

    def w(rows: int, cols: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(rows, cols, generator=g) * (scale / cols**0.5)

    t = {
        f"{prefix}self_attn.q_proj.weight": w(HEADS * hd, qkv_in),
        f"{prefix}self_attn.k_proj.weight": w(KV_HEADS * hd, qkv_in),
        f"{prefix}self_attn.v_proj.weight": w(KV_HEADS * hd, qkv_in),
        f"{prefix}self_attn.o_proj.weight": w(HIDDEN, HEADS * hd),
        f"{prefix}mlp.gate_proj.weight": w(INTER, HIDDEN),
        f"{prefix}mlp.up_proj.weight": w(INTER, HIDDEN),
        f"{prefix}mlp.down_proj.weight": w(HIDDEN, INTER),
        f"{prefix}post_attention_layernorm.weight": torch.ones(HIDDEN),
    }
    if input_norm:
        t[f"{prefix}input_layernorm.weight"] = torch.ones(HIDDEN)
    return t


def _save(dest: Path, tensors: dict[str, object], config: dict[str, object]) -> None:
    from safetensors.torch import save_file

    dest.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dest / "model.safetensors"))  # type: ignore[attr-defined]
    (dest / "config.json").write_text(json.dumps(config, indent=1))
    (dest / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 0, "eos_token_id": 1, "do_sample": False})
    )


def build(root: Path) -> Path:
    import torch

    g = torch.Generator().manual_seed(SEED)
    target: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN, generator=g),
        "model.norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": torch.randn(VOCAB, HIDDEN, generator=g) * (4.0 / HIDDEN**0.5),
    }
    for i in range(LAYERS):
        layer = _layer(g, f"model.layers.{i}.", HIDDEN, input_norm=True)
        if i >= 2:  # the draft's two layers dominate the residual stream
            for k in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
                layer[f"model.layers.{i}.{k}"] = layer[f"model.layers.{i}.{k}"] * 0.15  # type: ignore[operator]
        target.update(layer)  # type: ignore[arg-type]
    for name in ("target", "draft", "eagle", "eagle3"):
        (root / name).mkdir(parents=True, exist_ok=True)
        build_tokenizer(root / name)
    _save(root / "target", target, _llama_config(LAYERS))
    draft = {
        k: v
        for k, v in target.items()
        if not k.startswith("model.layers.") or int(k.split(".")[2]) < 2
    }
    _save(root / "draft", draft, _llama_config(2))
    eagle = {"fc.weight": torch.randn(HIDDEN, 2 * HIDDEN, generator=g) / (2 * HIDDEN) ** 0.5}
    eagle.update(_layer(g, "layers.0.", HIDDEN, input_norm=False))  # type: ignore[arg-type]
    _save(root / "eagle", eagle, _llama_config(1))
    eagle3 = {
        "fc.weight": torch.randn(HIDDEN, 3 * HIDDEN, generator=g) / (3 * HIDDEN) ** 0.5,
        "norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": target["lm_head.weight"].clone(),
        "midlayer.hidden_norm.weight": torch.ones(HIDDEN),
    }
    eagle3.update(_layer(g, "midlayer.", 2 * HIDDEN, input_norm=True))  # type: ignore[arg-type]
    cfg3 = _llama_config(1)
    cfg3["draft_vocab_size"] = VOCAB
    _save(root / "eagle3", eagle3, cfg3)
    (root / ".complete").write_text(json.dumps({"version": BUILD_VERSION, "seed": SEED}))
    return root


def ensure_models(root: Path | None = None) -> Path:
    root = root or cache_dir()
    if not (root / ".complete").is_file():
        build(root)
    return root


if __name__ == "__main__":
    out = ensure_models(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    print(out)
