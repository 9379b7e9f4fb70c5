"""Hugging Face greedy `generate` with a static cache, compiled by transformers itself
(`get_compiled_call`: `torch.compile(self.__call__, **CompileConfig)`), counting what it does.

A small Llama-shaped model built from a config with random weights (nothing is downloaded).
On CPU transformers compiles only when told to (`CompileConfig._compile_all_devices`); on CUDA
its default is inductor with mode reduce-overhead (CUDA graphs through cudagraph trees).

The program's own counts, printed as JSON (`--out FILE` too): forward calls (one prefill a
generate, made eagerly, plus each call of the compiled decode step, counted around what
`get_compiled_call` returns), `torch.cuda.CUDAGraph.replay` calls, Dynamo's counters (graphs,
graph breaks, recompiles), the generated tokens and the wall time of each generate.

    python bench/hf_static_compile.py --device cpu --backend eager --rounds 2
    tracekit launch --phases PHASES.toml -- python bench/hf_static_compile.py ...

tests/integration/test_hf_static_compile.py runs it on CPU with and without tracekit;
bench/compiled_gpu.py on the H200.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.hf_maps import SPEC_MAP
from tracekit.demo.server import GcClock

PHASES_TOML = """\
[adapter]
name = "hf-static-compile"

[[phase]]
name = "decode"
targets = ["transformers.models.llama.modeling_llama:LlamaForCausalLM.forward"]

[cycle]
starts_with = "decode"
"""

# --assisted: HF assisted generation (a 1-layer draft of the same vocabulary), with the map of
# tests/integration/test_hf_assisted.py
ASSISTED_TOML = SPEC_MAP

CFG = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "bos_token_id": 0,
    "eos_token_id": None,
    "pad_token_id": 0,
}
BIG = {  # --size large: Llama-shaped, a few ms a decode step on an H200
    "vocab_size": 32000,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "max_position_embeddings": 1024,
    "bos_token_id": 0,
    "eos_token_id": None,
    "pad_token_id": 0,
}


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default="inductor", help="torch.compile backend")
    p.add_argument("--mode", default=None, help="torch.compile mode (CUDA: reduce-overhead)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--size", choices=["tiny", "large"], default="tiny")
    p.add_argument("--rounds", type=int, default=2, help="generates (one prompt each)")
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=6)
    p.add_argument(
        "--ab",
        action="store_true",
        help=(
            "under `tracekit launch`: switch recording off and on between generates (after the "
            "first: on, off, off, on, ...), each generate's state in `recording`"
        ),
    )
    p.add_argument(
        "--no-flush",
        action="store_true",
        help="under `tracekit launch --flush-interval 600`: raise the recorder's batch past the "
        "run (a bench-only knob on a private attribute), so no flush runs while it generates",
    )
    p.add_argument(
        "--assisted",
        action="store_true",
        help="assisted generation (eager, a 1-layer draft model) instead of the compiled "
        "static-cache generate; map ASSISTED_TOML",
    )
    p.add_argument(
        "--bare-boundary",
        nargs="?",
        const="python",
        choices=["python", "c", "generic"],
        default=None,
        help="an experiment (issue 25): under tracekit launch, the compiled boundary's recorded "
        "call once its site is known replaced by: `python` (default) a plain call of the compiled "
        "function from Python (its frame and the replay count kept; no recorded call and, since "
        "the marker is set by the recorded call, no marker); `c` the same call made from C (a pass-through C callable: is it the "
        "call from C that costs?); `generic` the Python `enter` / `exit` recording it",
    )
    p.add_argument(
        "--step-ab",
        type=int,
        default=0,
        metavar="BLOCK",
        help="under `tracekit launch`: switch recording inside the generates, in ABBA blocks of "
        "BLOCK compiled decode calls (after the first generate), and time each call on the host "
        "(`call_ms`: the compiled call, its return after the graph launch; `step_ms`: from this "
        "call's start to the next one's, the decode step): µs a call, on minus off, in one "
        "process (bench/compiled_report.py `hf_step_ab`)",
    )
    p.add_argument(
        "--crossings",
        type=int,
        default=0,
        metavar="BLOCK",
        help="with --assisted, under `tracekit launch`: switch recording at the cycles' starts in "
        "ABBA blocks of BLOCK cycles (after the first generate) and time each wrapped call's "
        "crossings from its caller and its own first and last line (bench/crossings.py): the "
        "recorder's cost a cycle, by phase, apart from the calls' work and device waits "
        "(bench/compiled_report.py `hf_crossings`)",
    )
    p.add_argument(
        "--no-replay-count",
        action="store_true",
        help="an experiment (issue 25): under tracekit launch, torch's CUDAGraph.replay without "
        "tracekit's replay count",
    )
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


class StepAB:
    """`--step-ab`: recording switched in ABBA blocks of compiled decode calls, each call timed
    on the host; the series in the result as the demo's A/B writes them (`ab_on`, `ab_blocks`,
    `after_prefill`: the calls left out, those of the first, compiling, generate)."""

    def __init__(self, block: int, switch: Any) -> None:
        self.block, self.switch = block, switch
        self.on: list[bool] = []
        self.call_ms: list[float] = []
        self.step_ms: list[float] = []
        self.left_out: list[bool] = []
        self.generate = 0
        self._last: int | None = None  # the previous call's start in this generate
        self._state: bool | None = None

    def new_generate(self, i: int) -> None:
        """Generate `i` begins: the last call of the one before had no next call (no step)."""
        if self.left_out:
            self.left_out[-1] = True
        self.generate, self._last = i, None

    def call(self, compiled: Any, a: tuple[Any, ...], k: dict[str, Any]) -> Any:
        n = len(self.on)
        on = (n // self.block) % 4 in (0, 3)
        if on != self._state:
            self.switch(on)
            self._state = on
        t0 = time.perf_counter_ns()
        out = compiled(*a, **k)
        t1 = time.perf_counter_ns()
        if self._last is not None:  # the previous call's step: its start to this one's
            self.step_ms[-1] = (t0 - self._last) / 1e6
        self._last = t0
        self.on.append(on)
        self.call_ms.append((t1 - t0) / 1e6)
        self.step_ms.append((t1 - t0) / 1e6)  # replaced by the step once the next call starts
        self.left_out.append(self.generate == 0)
        return out

    def result(self) -> dict[str, Any]:
        return {
            "ab_on": self.on,
            "ab_blocks": self.block,
            "after_prefill": self.left_out,
            "call_ms": self.call_ms,
            "step_ms": self.step_ms,
        }


def _bare_boundary(variant: str) -> None:
    """`--bare-boundary`: collectors/compiled.py's `_fast_path` replaced (see --help)."""
    compiled_mod = sys.modules.get("tracekit.collectors.compiled")
    if compiled_mod is None:
        raise SystemExit("--bare-boundary: run under tracekit launch")

    def bare(rec: Any, compiled: Any, _site: Any, generic: Any, _marker: Any) -> Any:
        if variant == "generic":
            return lambda args, kwargs: generic(*args, **kwargs)
        if variant == "c":  # the replay counter's C type as a pass-through (it counts, harmless)
            from tracekit.collectors.recording.native import NATIVE

            through = NATIVE.ReplayCount(compiled, rec, rec._hot)
            return lambda args, kwargs: through(*args, **kwargs)
        return lambda args, kwargs: compiled(*args, **kwargs)

    compiled_mod._fast_path = bare  # type: ignore[attr-defined]


def _no_replay_count() -> None:
    """`--no-replay-count`: tracekit's hook of `CUDAGraph.replay` (collectors/graphs.py) undone."""
    import torch.cuda.graphs as graphs

    replay = graphs.CUDAGraph.replay
    if not getattr(replay, "__tracekit_replay__", False):
        raise SystemExit("--no-replay-count: run under tracekit launch on CUDA")
    graphs.CUDAGraph.replay = replay.__wrapped__  # type: ignore[attr-defined,method-assign]


def _crossings(block: int) -> Any:
    """`--crossings`: HF assisted generation's three wrapped calls timed (bench/crossings.py)."""
    from crossings import Crossings
    from transformers.generation import candidate_generator
    from transformers.models.llama import modeling_llama

    switch = _recording_switch()
    if switch is None:
        raise SystemExit("--crossings: run under tracekit launch")
    c = Crossings(switch, block)
    generator = candidate_generator.AssistedCandidateGenerator
    c.watch(generator, "get_candidates", "draft", starts_cycle=True)
    c.watch(modeling_llama.LlamaForCausalLM, "forward", "verify")  # the draft model's too
    c.watch(generator, "update_candidate_strategy", "accept")
    c.start()
    return c


def _recording_switch() -> Any:
    """tracekit's `Recorder.set_recording` when `tracekit launch` instruments this process."""
    runtime = sys.modules.get("tracekit.collectors.runtime")
    current = getattr(runtime, "current", None)
    rt = current() if current is not None else None
    return getattr(getattr(rt, "recorder", None), "set_recording", None)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _args(argv)
    if args.bare_boundary:
        _bare_boundary(args.bare_boundary)
    import torch

    if args.no_replay_count:
        _no_replay_count()
    from torch._dynamo.utils import counters
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.generation.configuration_utils import CompileConfig

    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(1)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    cfg = LlamaConfig(num_hidden_layers=args.layers, **(BIG if args.size == "large" else CFG))
    model = LlamaForCausalLM(cfg).to(device=args.device, dtype=dtype).eval()
    gen_kw: dict[str, Any] = {"cache_implementation": "static"}
    if args.assisted:
        base = BIG if args.size == "large" else CFG
        draft = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, **base))
        gen_kw = {"assistant_model": draft.to(device=args.device, dtype=dtype).eval()}
    else:
        cc = CompileConfig(backend=args.backend, mode=args.mode, fullgraph=False)
        cc._compile_all_devices = True  # transformers' switch: compile off-GPU too
        model.generation_config.compile_config = cc

    counts = {"decode_calls": 0, "replays": 0}
    orig_get = type(model).get_compiled_call

    def get_compiled_call(self: Any, config: Any) -> Any:
        compiled = orig_get(self, config)

        def counted(*a: Any, **k: Any) -> Any:
            counts["decode_calls"] += 1
            if step_ab is not None:
                return step_ab.call(compiled, a, k)
            return compiled(*a, **k)

        return counted

    type(model).get_compiled_call = get_compiled_call  # type: ignore[method-assign]
    if args.device.startswith("cuda"):
        graph_cls = torch.cuda.CUDAGraph
        orig_replay = graph_cls.replay

        def replay(self: Any, *a: Any, **k: Any) -> Any:
            counts["replays"] += 1
            return orig_replay(self, *a, **k)

        graph_cls.replay = replay  # type: ignore[method-assign]

    gen = torch.Generator().manual_seed(1)
    outputs: list[list[int]] = []
    wall_s: list[float] = []
    thread_s: list[float] = []  # this thread's CPU time: not inflated by time slices lost to others
    switch = _recording_switch() if args.ab else None
    step_ab = StepAB(args.step_ab, _recording_switch()) if args.step_ab else None
    if step_ab is not None and step_ab.switch is None:
        raise SystemExit("--step-ab: run under tracekit launch")
    crossings = _crossings(args.crossings) if args.crossings else None
    if args.no_flush and switch is not None:
        rec = switch.__self__
        rec._flush_n, rec._flush_bytes = 10**8, 10**12
    recording: list[bool] = []
    gc_s: list[float] = []  # garbage collections during each generate
    with GcClock() as gc_clock:
        for i in range(args.rounds):
            on = i == 0 or (i - 1) % 4 in (0, 3)  # ABBA after the first (compiling) generate
            if switch is not None:
                switch(on)
            if step_ab is not None:
                step_ab.new_generate(i)
            if crossings is not None:
                crossings.left_out = i == 0
            recording.append(on if switch is not None else _recording_switch() is not None)
            prompt = torch.randint(1, cfg.vocab_size, (1, args.prompt_len), generator=gen)
            prompt = prompt.to(args.device)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0, c0, g0 = time.perf_counter(), time.thread_time(), gc_clock.total_s
            out = model.generate(
                prompt,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                do_sample=False,
                **gen_kw,
            )
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            if crossings is not None:
                crossings.end_generate()
            wall_s.append(time.perf_counter() - t0)
            thread_s.append(time.thread_time() - c0)
            gc_s.append(gc_clock.total_s - g0)
            outputs.append(out[0, args.prompt_len :].tolist())
    result = {
        "rounds": args.rounds,
        "new_tokens": args.new_tokens,
        "forward_calls": counts["decode_calls"] + args.rounds,  # + one eager prefill a generate
        "decode_calls": counts["decode_calls"],
        "replays": counts["replays"],
        "dynamo": {k: dict(v) for k, v in counters.items() if k in ("stats", "graph_break")},
        "recompiles": int(sum(counters["recompiles"].values())) if "recompiles" in counters else 0,
        "outputs": outputs,
        "wall_s": wall_s,
        "thread_s": thread_s,
        "gc_s": gc_s,
        "recording": recording,
        **(step_ab.result() if step_ab is not None else {}),
        **(crossings.stop() if crossings is not None else {}),
    }
    text = json.dumps(result)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
