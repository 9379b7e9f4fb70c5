"""A step's acceptance as the server counts it, from the readings of its accept rules.

vLLM counts a step's speculative decoding per request that drafted: `num_drafts` (requests with
draft tokens), `num_draft_tokens`, `num_accepted_tokens` and `num_accepted_tokens_per_pos`
(vllm/v1/spec_decode/metrics.py); its mean acceptance length is 1 + accepted / drafts, pooled.
`step_accept` gives the same numbers for one cycle from what the map read in it
(docs/DEFINITIONS.md "Acceptance length"): each request's tokens (1 + accepted; 0 for a request
whose output was discarded), from a "count" rule with a list value, and each request's draft
tokens, from a "drafted" rule. Merge writes them into the `cycles` table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepAccept:
    """One cycle's acceptance counts. `drafted` is None when no rule gave draft tokens, then
    every request that emitted a token counts as one that drafted."""

    drafts: int  # requests that drafted (vLLM's num_drafts)
    accepted: float  # accepted draft tokens, summed over the requests
    requests: int | None  # requests that emitted tokens in the step
    drafted: int | None = None  # draft tokens (vLLM's num_draft_tokens)
    per_pos: tuple[int, ...] | None = None  # requests whose draft position p was accepted

    @property
    def accept_len(self) -> float | None:
        """1 + accepted / drafts; None when no request drafted."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    def row(self) -> dict[str, Any]:
        """The `cycles` columns (tracekit/store/schema.py)."""
        return {
            "drafts": self.drafts,
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "requests": self.requests,
            "accepted_per_pos": list(self.per_pos) if self.per_pos is not None else None,
        }


def _per_pos(accepted: list[float], width: int) -> tuple[int, ...] | None:
    """Requests whose position p (0-based) was accepted: those with more than p accepted."""
    if any(a != int(a) for a in accepted):
        return None
    return tuple(sum(1 for a in accepted if a > p) for p in range(width))


def step_accept(tokens: list[list[float]], drafted: list[list[float]]) -> StepAccept | None:
    """The cycle's counts from its per-request readings: `tokens` (each a "count" list, one
    number a request), `drafted` (each a "drafted" list). None when it read neither (a
    cycle's tokens read as one number, a delta rule's: `accept_len` alone, one request).

    With draft tokens: drafts = requests with > 0 of them, accepted = the sum over requests of
    max(tokens - 1, 0) (a request without drafts emits its one token: 0 accepted). Without:
    every request with >= 1 token drafted, accepted = tokens - 1."""
    toks = [t for lst in tokens for t in lst]
    if drafted:
        dl = [d for lst in drafted for d in lst]
        acc = [max(t - 1.0, 0.0) for t in toks]
        width = int(max(dl + acc, default=0))
        return StepAccept(
            drafts=sum(1 for d in dl if d > 0),
            accepted=sum(acc),
            requests=sum(1 for t in toks if t >= 1) if tokens else None,
            drafted=int(sum(dl)),
            per_pos=_per_pos(acc, width),
        )
    if tokens:
        acc = [t - 1.0 for t in toks if t >= 1]
        return StepAccept(
            drafts=len(acc),
            accepted=sum(acc),
            requests=len(acc),
            per_pos=_per_pos(acc, int(max(acc, default=0))),
        )
    return None
