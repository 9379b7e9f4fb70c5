"""DESIGN.md's Hugging Face example under `tracekit launch`, on CPU: assisted generation
(`model.generate(..., assistant_model=draft)`) with a tiny random Llama target and a draft that is
the target with its weights slightly perturbed (so acceptance is neither 1 nor the maximum).

Checks, on a real program nobody here wrote the decoding loop of:
- acceptance from a user map (`accept = { from = "arg:input_ids", value = "shape[-1]",
  kind = "delta" }` on the draft phase: the length before each cycle; the same on
  `update_candidate_strategy`, whose `input_ids` holds the cycle's accepted tokens, with
  `state = "after"`) equals the program's own tokens per cycle, cycle by cycle, the last cycle
  of each `generate` included (the program counts `num_matches + 1` at each
  `update_candidate_strategy` call); with the "before" length alone, every cycle but the last
  of each `generate`;
- outermost wins: the draft model's forward calls inside `get_candidates` are sub-phases of
  draft, and the top-level phases of each cycle are one draft and one verify, in light and in
  full mode alike (the same (cycle, phase) counts on the profiled cycles).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("transformers")

from tests.integration.hf_maps import SPEC_MAP
from tracekit.analyzers._load import read_rank
from tracekit.analyzers.phases import rank_phases
from tracekit.analyzers.rules import load_rules
from tracekit.store.reader import read_table

pytestmark = [pytest.mark.slow, pytest.mark.torch]

PROGRAM = r"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation.candidate_generator import AssistedCandidateGenerator

torch.manual_seed(0)
torch.set_num_threads(1)
CFG = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_attention_heads=4,
           num_key_value_heads=2, max_position_embeddings=512, bos_token_id=0,
           eos_token_id=None, pad_token_id=0)
target = LlamaForCausalLM(LlamaConfig(num_hidden_layers=4, **CFG)).eval()
draft = LlamaForCausalLM(LlamaConfig(num_hidden_layers=4, **CFG)).eval()
draft.load_state_dict(target.state_dict())
with torch.no_grad():
    for p in draft.parameters():
        p.add_(torch.randn_like(p) * 0.002)
draft.generation_config.num_assistant_tokens = 4
draft.generation_config.num_assistant_tokens_schedule = "constant"
draft.generation_config.assistant_confidence_threshold = 0.0

# The program's own count: tokens a cycle = matches + 1 (the bonus token), as HF reports them.
per_cycle = []
_orig = AssistedCandidateGenerator.update_candidate_strategy
def _count(self, input_ids, scores, num_matches):
    per_cycle.append(int(num_matches) + 1)
    return _orig(self, input_ids, scores, num_matches)
AssistedCandidateGenerator.update_candidate_strategy = _count

mode = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
new_tokens, prompt_len = (int(sys.argv[3]) if len(sys.argv) > 3 else 40), 8
gen = torch.Generator().manual_seed(1)
tokens = 0
elapsed = 0.0
ends = []
for r in range(rounds):
    prompt = torch.randint(1, 96, (1, prompt_len), generator=gen)
    kw = {"assistant_model": draft} if mode == "spec" else {}
    t0 = time.perf_counter()
    out = target.generate(prompt, max_new_tokens=new_tokens, do_sample=False, **kw)
    elapsed += time.perf_counter() - t0
    tokens += out.shape[-1] - prompt_len
    ends.append(len(per_cycle))
print(json.dumps({"per_cycle": per_cycle, "round_ends": ends, "tokens": tokens,
                  "seconds": elapsed, "tokens_per_s": tokens / elapsed,
                  "output_tail": out[0, -5:].tolist()}))
"""

# the map before `state`: the length before each cycle only
BEFORE_MAP = SPEC_MAP.split("# the length after")[0] + '[cycle]\nstarts_with = "draft"\n'

PLAIN_MAP = """
[adapter]
name = "hf-plain"
package = "transformers"

[[phase]]
name = "decode"
targets = ["transformers.models.llama.modeling_llama:LlamaForCausalLM.forward"]

[cycle]
targets = ["transformers.models.llama.modeling_llama:LlamaForCausalLM.forward"]
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _launch(cwd: Path, name: str, mapfile: str, *args: str) -> tuple[Path, dict]:
    res = subprocess.run(
        [sys.executable, "-m", "tracekit", "launch", "--out", str(cwd / "runs"), "--name", name,
         "--phases", mapfile, *args],
        cwd=cwd, env=_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "accept rule" not in res.stderr, res.stderr[-2000:]
    own = json.loads(res.stdout.strip().splitlines()[-1])
    return cwd / "runs" / name, own


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hf")
    (d / "prog.py").write_text(PROGRAM)
    (d / "spec.toml").write_text(SPEC_MAP)
    (d / "before.toml").write_text(BEFORE_MAP)
    (d / "plain.toml").write_text(PLAIN_MAP)
    return d


def _top(run: Path) -> pl.DataFrame:
    phases = read_table(run, "phases").with_columns(pl.col("phase").cast(pl.String))
    return phases.filter(pl.col("depth") == 0)


def test_acceptance_from_user_map_equals_program_tokens_per_cycle(hf: Path) -> None:
    # GIVEN DESIGN.md's map with accept rules before and after each cycle, WHEN the program
    # runs under launch (light)
    run, own = _launch(hf, "spec-light", "spec.toml", "--", sys.executable, "prog.py", "spec")
    cycles = read_table(run, "cycles").sort("cycle")
    own_cycles = own["per_cycle"]
    # THEN one cycle a get_candidates call, and each cycle's tokens are the program's own, the
    # last cycle of each generate() included
    assert cycles.height == len(own_cycles)
    assert cycles["accept_len"].to_list() == [float(n) for n in own_cycles]
    mean = sum(own_cycles) / len(own_cycles)
    assert 1.2 < mean < 4.5  # neither trivially 1 nor always the full 4 + 1
    summary = json.loads(
        subprocess.run(
            [sys.executable, "-m", "tracekit", "summary", str(run), "--all-cycles", "--json"],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    assert summary["accept_len_mean"] == pytest.approx(mean)
    # AND outermost wins: each cycle's top level is one draft, one verify and one accept
    # (update_candidate_strategy); the draft model's forward calls are sub-phases of draft
    top = _top(run).filter(pl.col("cycle") >= 0)
    counts = top.group_by("cycle", "phase").len()
    assert set(counts["len"].to_list()) == {1}
    assert counts.height == 3 * cycles.height
    nested = read_table(run, "phases").filter(pl.col("depth") > 0)
    assert nested.height > 0
    assert set(nested["parent"].cast(pl.String).to_list()) == {"draft"}


def test_full_mode_keeps_draft_and_matches_light_mode(hf: Path) -> None:
    # GIVEN the same program in light and in full mode (cycles 2..4 profiled)
    light, _ = _launch(hf, "light", "spec.toml", "--", sys.executable, "prog.py", "spec", "1")
    full, _ = _launch(
        hf, "full", "spec.toml", "--mode", "full", "--profile-cycles", "2:3",
        "--", sys.executable, "prog.py", "spec", "1",
    )  # fmt: skip
    # WHEN the full run's phases come from its Kineto annotations
    rp = rank_phases(read_rank(full, 0), load_rules())
    assert rp is not None
    assert not rp.approximate
    inst = rp.instances.filter(pl.col("depth") == 0)
    got = sorted(inst.filter(pl.col("cycle") >= 0).group_by("cycle", "phase").len().iter_rows())
    # THEN every profiled cycle has its draft, verify and accept, as in light mode
    lt = _top(light).filter(pl.col("cycle").is_between(2, 4))
    want = sorted(lt.group_by("cycle", "phase").len().iter_rows())
    assert got == want
    want_phases = ("draft", "verify", "accept")
    assert {(c, p) for c, p, _ in got} == {(c, p) for c in (2, 3, 4) for p in want_phases}
    # AND no annotation fell outside its cycle; nested verify ranges are draft's sub-phases
    assert inst.filter(pl.col("cycle") < 0).height == 0
    sub = rp.instances.filter(pl.col("depth") > 0)
    assert sub.height > 0
    assert set(sub["parent"].to_list()) == {"draft"}


def test_short_generates_count_every_cycle(hf: Path) -> None:
    """Four generates of 7 new tokens: 5, 2, 2 and 3 cycles (this program, greedy), so the last
    cycle is a large share of each."""
    # GIVEN short generates, WHEN run under the map with and without the "after" length
    args = ("--", sys.executable, "prog.py", "spec", "4", "7")
    run, own = _launch(hf, "short", "spec.toml", *args)
    before, own_b = _launch(hf, "short-before", "before.toml", *args)
    assert own_b["per_cycle"] == own["per_cycle"]  # the same program, greedy
    per, ends = own["per_cycle"], own["round_ends"]
    sizes = [e - s0 for s0, e in zip([0, *ends[:-1]], ends, strict=True)]
    assert {2, 3} <= set(sizes), sizes  # generates of 2 and of 3 cycles
    for s0, e in zip([0, *ends[:-1]], ends, strict=True):
        assert sum(per[s0:e]) == 7  # each generate's cycles emitted its 7 tokens
    # THEN with it, every cycle is the program's own count
    got = read_table(run, "cycles").sort("cycle")["accept_len"].to_list()
    assert got == [float(n) for n in per]
    # AND without it, the last cycle of each generate has none (what the "after" rule adds)
    got_b = read_table(before, "cycles").sort("cycle")["accept_len"].to_list()
    last = {e - 1 for e in ends}
    assert got_b == [None if i in last else float(n) for i, n in enumerate(per)]
