"""EAGLE-style speculative decoding (chain drafting, greedy acceptance) and plain decoding.

One sequence at a time. State between cycles, with n tokens in the target's KV cache:

- `next_token` is x_n: emitted already, not yet run through the target;
- the draft cache holds n positions, `draft_feature` is the head's guess of h_n and
  `first_draft` its token guess for x_{n+1}.

A cycle (`step`) is `draft` (K tokens: the first from `first_draft`, then K-1 forwards of the
head on its own features), `verify` (x_n and the K drafts through the target in one forward;
accept the longest prefix the target agrees with, add the target's own next token as the bonus,
roll the target cache back past the rejected ones) and `draft_extend` (re-run the head on the
target's real features of the accepted tokens, which replaces the drafted cache entries).
These method names are tracekit's hook points (docs/dev/CONTRACTS.md); `verify` and `step` return
objects with an int `accept_len`.

With `simulate_accept_len` the verifier still runs the same forward and compares the drafts with
the target's choices, but the number of drafts kept each cycle comes from `AcceptSchedule`
instead (SGLang's `SGLANG_SIMULATE_ACC_LEN`, vLLM's synthetic rejection sampling): the work a
cycle does is a real cycle's, only acceptance is held.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tracekit.demo import clocks
from tracekit.demo.draft import DraftHead
from tracekit.demo.graphs import GraphRunner
from tracekit.demo.target_model import KVCache, TargetModel

VERIFY_MODES = ("extend", "graph")


class AcceptSchedule:
    """Acceptance lengths whose running mean is held at `mean` (in [1, K+1]).

    Cycle c emits round(c x mean) - round((c-1) x mean) tokens (round half up), so after N
    cycles the tokens are round(N x mean) and the mean acceptance length is `mean` to within
    1/(2N); every cycle emits floor(mean) or ceil(mean) tokens (vLLM's minimum-variance schedule
    has the same two values, drawn at random). Deterministic, so every rank keeps the same count.
    """

    def __init__(self, mean: float, draft_tokens: int) -> None:
        if not 1.0 <= mean <= draft_tokens + 1:
            msg = (
                f"simulated acceptance length {mean} is outside [1, {draft_tokens + 1}] "
                f"(1 to K+1 with K={draft_tokens} draft tokens)"
            )
            raise ValueError(msg)
        self.mean = mean
        self.k = draft_tokens
        self.cycles = 0
        self.tokens = 0

    def next(self) -> int:
        """Acceptance length (accepted drafts + 1) of the next cycle."""
        self.cycles += 1
        total = math.floor(self.cycles * self.mean + 0.5)
        n = min(max(total - self.tokens, 1), self.k + 1)
        self.tokens += n
        return n


@dataclass
class StepResult:
    """One cycle: the tokens it emitted; `accept_len` = len(tokens)."""

    accept_len: int
    tokens: list[int]


@dataclass
class DraftResult:
    tokens: torch.Tensor  # [K] int64, on the model's device


@dataclass
class VerifyResult:
    """`accept_len` = accepted draft tokens + the bonus token."""

    accept_len: int
    tokens: list[int]
    hidden: torch.Tensor  # [accept_len, H]: target features of the positions that stay


def _positions(start: int, count: int, device: torch.device) -> torch.Tensor:
    return torch.arange(start, start + count, device=device)


def _ids(tokens: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(list(tokens), dtype=torch.long, device=device)


class _Decoder:
    def __init__(self, target: TargetModel) -> None:
        self.target = target
        self.device = target.device
        self.cache: KVCache = target.new_cache()
        self.next_token = -1
        self.output: list[int] = []
        self.static_kv = False  # the target reads the whole masked cache (compiled: one shape)
        self.target_calls = 0  # the program's own count of target forward calls

    def compile_target(self, mode: str | None = None) -> None:
        """Run the target under `torch.compile(target, mode=mode)` (`--compile`). Its calls then
        read the whole static cache through the position mask (kv_len None: one shape a token
        count, no recompile a step); on CUDA the cache tensors are marked static addresses, so
        reduce-overhead's CUDA graphs may write them in place (as transformers' StaticCache)."""
        if self.device.type == "cuda":
            for t in (*self.cache.keys, *self.cache.values):
                torch._dynamo.mark_static_address(t)
        self.target = torch.compile(self.target, mode=mode)  # type: ignore[assignment]
        self.static_kv = True

    def _kv(self, n: int) -> int | None:
        """The kv_len of a target call (and its count: every target call passes here)."""
        self.target_calls += 1
        return None if self.static_kv else n

    @property
    def seq_len(self) -> int:
        """Tokens in the target's KV cache (prompt + emitted, less `next_token`)."""
        return self.cache.length

    def _check_prompt(self, prompt: Sequence[int]) -> None:
        if not prompt:
            msg = "the prompt must have at least one token"
            raise ValueError(msg)
        if len(prompt) >= self.cache.max_len:
            msg = f"a prompt of {len(prompt)} tokens does not fit {self.cache.max_len} positions"
            raise ValueError(msg)

    @torch.inference_mode()
    def _prefill_target(self, prompt: Sequence[int]) -> torch.Tensor:
        self._check_prompt(prompt)
        self.cache.truncate(0)
        n = len(prompt)
        hidden: torch.Tensor
        hidden, logits = self.target(
            _ids(prompt, self.device), _positions(0, n, self.device), self.cache, self._kv(n)
        )
        self.cache.truncate(n)
        self.next_token = int(logits[-1].argmax())
        self.output = [self.next_token]
        return hidden


class BaselineDecoder(_Decoder):
    """Plain greedy decoding: one target forward a token (`step` is the `decode` phase)."""

    def __init__(self, target: TargetModel, *, use_graphs: bool = False) -> None:
        super().__init__(target)
        self._graph: GraphRunner | None = None
        if use_graphs:
            self._capture()

    def prefill(self, prompt: Sequence[int]) -> int:
        self._prefill_target(prompt)
        return self.next_token

    def room(self) -> int:
        """Steps left before the KV cache is full."""
        return self.cache.max_len - self.seq_len - 1

    def _capture(self) -> None:
        inputs = {
            "ids": torch.zeros(1, dtype=torch.long, device=self.device),
            "pos": torch.zeros(1, dtype=torch.long, device=self.device),
        }

        def decode() -> tuple[torch.Tensor, ...]:
            _, logits = self.target(inputs["ids"], inputs["pos"], self.cache, None)
            return (logits.argmax(-1),)

        with torch.inference_mode():
            self._graph = GraphRunner(decode, inputs)

    @clocks.body("step")
    @torch.inference_mode()
    def step(self) -> StepResult:
        n = self.seq_len
        ids = _ids([self.next_token], self.device)
        pos = _positions(n, 1, self.device)
        if self._graph is not None:
            (nxt,) = self._graph.replay(ids=ids, pos=pos)
        else:
            _, logits = self.target(ids, pos, self.cache, self._kv(n + 1))
            nxt = logits.argmax(-1)
        self.cache.truncate(n + 1)
        self.next_token = int(nxt[0])
        self.output.append(self.next_token)
        return StepResult(accept_len=1, tokens=[self.next_token])


class SpeculativeDecoder(_Decoder):
    """EAGLE-style chain speculative decoding with greedy acceptance."""

    def __init__(
        self,
        target: TargetModel,
        draft_head: DraftHead,
        *,
        draft_tokens: int = 3,
        use_graphs: bool = False,
        verify_mode: str = "extend",
        simulate_accept_len: float | None = None,
    ) -> None:
        super().__init__(target)
        if draft_tokens < 1:
            msg = f"--draft-tokens must be at least 1, got {draft_tokens}"
            raise ValueError(msg)
        if verify_mode not in VERIFY_MODES:
            msg = f"--verify-mode must be one of {', '.join(VERIFY_MODES)}, got {verify_mode!r}"
            raise ValueError(msg)
        if verify_mode == "graph" and not use_graphs:
            msg = "--verify-mode graph needs CUDA graphs (--device cuda with NCCL)"
            raise ValueError(msg)
        self.head = draft_head
        self.k = draft_tokens
        self.schedule = (
            None
            if simulate_accept_len is None
            else AcceptSchedule(simulate_accept_len, draft_tokens)
        )
        # drafts the real greedy check accepted, summed over cycles (equal to the kept drafts
        # unless acceptance is simulated)
        self.natural_accepted = 0
        self.verify_mode = verify_mode
        self.draft_cache = draft_head.new_cache()
        self.draft_feature = torch.zeros(
            1, target.cfg.hidden_size, dtype=target.dtype, device=self.device
        )
        self.first_draft = torch.zeros(1, dtype=torch.long, device=self.device)
        self._base = 0  # target cache length when the current cycle began
        self._draft_graph: GraphRunner | None = None
        self._verify_graph: GraphRunner | None = None
        if use_graphs:
            self._capture()

    def room(self) -> int:
        """Cycles certainly left before the KV cache is full."""
        return (self.cache.max_len - self.seq_len - 1) // (self.k + 1)

    # -- prefill --------------------------------------------------------------------------

    @torch.inference_mode()
    def prefill(self, prompt: Sequence[int]) -> int:
        """Run the prompt through target and draft head; return the first generated token."""
        hidden = self._prefill_target(prompt)
        self.draft_cache.truncate(0)
        following = [*list(prompt[1:]), self.next_token]
        self._extend_head(hidden, following, 0)
        return self.next_token

    def _extend_head(self, features: torch.Tensor, following: Sequence[int], start: int) -> None:
        t = len(following)
        out = self.head(
            features,
            _ids(following, self.device),
            _positions(start, t, self.device),
            self.draft_cache,
            start + t,
        )
        self.draft_cache.truncate(start + t)
        self.draft_feature = out[-1:]
        self.first_draft = self.head.logits(self.draft_feature).argmax(-1)

    # -- one cycle ------------------------------------------------------------------------

    @clocks.body("step")
    @torch.inference_mode()
    def step(self) -> StepResult:
        drafted = clocks.call("draft", self.draft)
        verified = clocks.call("verify", self.verify, drafted)
        clocks.call("draft_extend", self.draft_extend, verified)
        return StepResult(accept_len=verified.accept_len, tokens=verified.tokens)

    def _draft_chain(
        self, feature: torch.Tensor, token: torch.Tensor, start: torch.Tensor, eager_n: int | None
    ) -> torch.Tensor:
        tokens = [token]
        for i in range(self.k - 1):
            pos = start + i
            kv_len = None if eager_n is None else eager_n + i + 1
            feature = self.head(feature, token, pos, self.draft_cache, kv_len)
            token = self.head.logits(feature).argmax(-1)
            tokens.append(token)
        return torch.cat(tokens)

    @clocks.body("draft")
    @torch.inference_mode()
    def draft(self) -> DraftResult:
        """K draft tokens: `first_draft`, then K-1 head forwards on its own features."""
        n = self.seq_len
        self._base = n
        start = _positions(n, 1, self.device)
        if self._draft_graph is not None:
            (tokens,) = self._draft_graph.replay(
                feature=self.draft_feature, token=self.first_draft, start=start
            )
            tokens = tokens.clone()
        else:
            tokens = self._draft_chain(self.draft_feature, self.first_draft, start, n)
        self.draft_cache.truncate(n + self.k - 1)
        return DraftResult(tokens=tokens)

    @clocks.body("verify")
    @torch.inference_mode()
    def verify(self, drafted: DraftResult) -> VerifyResult:
        """x_n and the drafts through the target at once; greedy accept; roll back the rest."""
        n = self._base
        ids = torch.cat([_ids([self.next_token], self.device), drafted.tokens])
        if self._verify_graph is not None:
            hidden, greedy = self._verify_graph.replay(ids=ids, start=_positions(n, 1, self.device))
        else:
            hidden, logits = self.target(
                ids, _positions(n, self.k + 1, self.device), self.cache, self._kv(n + self.k + 1)
            )
            greedy = logits.argmax(-1)
        want = greedy.tolist()
        got = drafted.tokens.tolist()
        accepted = 0
        while accepted < self.k and got[accepted] == want[accepted]:
            accepted += 1
        self.natural_accepted += accepted
        if self.schedule is not None:
            # Held acceptance: keep the first n-1 drafts as drafted (the tokens the target's
            # cache now holds, so the sequence stays the one the model saw) and add the
            # target's own token after them; a correct draft beyond them is dropped.
            accepted = self.schedule.next() - 1
        tokens = [*got[:accepted], want[accepted]]
        self.cache.truncate(n + accepted + 1)
        self.next_token = tokens[-1]
        self.output.extend(tokens)
        return VerifyResult(
            accept_len=accepted + 1, tokens=tokens, hidden=hidden[: accepted + 1].clone()
        )

    @clocks.body("draft_extend")
    @torch.inference_mode()
    def draft_extend(self, verified: VerifyResult) -> None:
        """Re-run the head on the target's features of the kept positions."""
        self._extend_head(verified.hidden, verified.tokens, self._base)

    # -- CUDA graphs ----------------------------------------------------------------------

    def _capture(self) -> None:
        dev = self.device
        h = self.target.cfg.hidden_size
        with torch.inference_mode():
            if self.k > 1:
                d_in = {
                    "feature": torch.zeros(1, h, dtype=self.target.dtype, device=dev),
                    "token": torch.zeros(1, dtype=torch.long, device=dev),
                    "start": torch.zeros(1, dtype=torch.long, device=dev),
                }

                def draft_chain() -> tuple[torch.Tensor, ...]:
                    return (self._draft_chain(d_in["feature"], d_in["token"], d_in["start"], None),)

                self._draft_graph = GraphRunner(draft_chain, d_in)
            if self.verify_mode == "graph":
                offsets = torch.arange(self.k + 1, device=dev)
                v_in = {
                    "ids": torch.zeros(self.k + 1, dtype=torch.long, device=dev),
                    "start": torch.zeros(1, dtype=torch.long, device=dev),
                }

                def verify() -> tuple[torch.Tensor, ...]:
                    hidden, logits = self.target(
                        v_in["ids"], v_in["start"] + offsets, self.cache, None
                    )
                    return hidden, logits.argmax(-1)

                self._verify_graph = GraphRunner(verify, v_in)
