"""A tiny offline vLLM run: `LLM.generate` over a few prompts, greedy; prints one JSON line.

Usage: python -m tests.servers.offline --method ngram|draft_model|eagle|eagle3|none
       [--tp N] [--eager|--compiled] [--max-tokens N] [--k N] --out FILE.json

The JSON has the generated token ids per prompt, vLLM's own spec-decode counters
(`vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`, read from
`LLM.get_metrics()`), the wall time of `generate` and tokens/s. vLLM's CPU platform spawns its
workers, so everything runs under the `__main__` guard.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from tests.servers.models import PROMPTS, ensure_models


def spec_config(method: str, models: Path, k: int) -> dict[str, Any] | None:
    if method == "none":
        return None
    if method == "ngram":
        return {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_max": 3,
            "prompt_lookup_min": 1,
        }
    model = {"draft_model": "draft", "eagle": "eagle", "eagle3": "eagle3"}[method]
    return {"method": method, "model": str(models / model), "num_speculative_tokens": k}


def counters(llm: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode") and hasattr(m, "value"):
            out[m.name] = out.get(m.name, 0.0) + float(m.value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--method", default="ngram")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--compiled", action="store_true")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    # sequences in flight: with several, a step verifies several requests' drafts (vLLM's
    # counters and tracekit pool them over the requests that drafted)
    ap.add_argument("--max-num-seqs", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    models = ensure_models()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    kwargs: dict[str, Any] = {}
    if not args.compiled:
        kwargs["enforce_eager"] = True
    llm = LLM(
        model=str(models / "target"),
        tensor_parallel_size=args.tp,
        speculative_config=spec_config(args.method, models, args.k),
        max_model_len=512,
        max_num_seqs=args.max_num_seqs,
        gpu_memory_utilization=0.5,
        dtype="float32",
        seed=0,
        disable_log_stats=False,
        **kwargs,
    )
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    prompts = PROMPTS[: args.prompts]
    llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=4))  # warm-up
    before = counters(llm)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    wall = time.perf_counter() - t0
    after = counters(llm)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    n = sum(len(t) for t in tokens)
    result = {
        "method": args.method,
        "tp": args.tp,
        "compiled": args.compiled,
        "tokens": tokens,
        "generated": n,
        "wall_s": wall,
        "tokens_per_s": n / wall if wall > 0 else None,
        "spec_total": after,
        "spec_timed": {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after},
    }
    args.out.write_text(json.dumps(result))
    print(json.dumps({k: v for k, v in result.items() if k != "tokens"}))


if __name__ == "__main__":
    main()
