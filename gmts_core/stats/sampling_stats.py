"""Token statistics of sampled answers, collected while ``generate`` samples them.

Sampling already computes, at every decoding step, the logits each new token is drawn from; a
second forward pass over prompt + answers would compute them again. :class:`StatsWhileSampling`
keeps them instead: hooks on the transformer body and the LM head record the step's final hidden
state norms and logits of the last position (through the model's post-head transforms,
:class:`gmts_core.model.logit_head.HeadPath`; a model with a logit scale gets its logits from
``HeadPath.logits`` on the recorded hidden state, as models differ in where they scale) and,
registered as a stopping criterion (which ``generate`` calls right after appending the sampled
token, and which never stops anything), it computes that token's statistics from them. Only
(B, V) logits of one step exist at a time; the statistics of each token are exactly those of
the distribution it was sampled from (the same numbers a full forward gives, up to float
rounding of the KV-cached path).

The hooks are on a module that other threads may run at the same time (a shared base model),
so they record only the forwards of the thread that registered them.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from transformers import StoppingCriteria

from gmts_core.model.logit_head import head_path
from gmts_core.stats.forward import AnswerStats, check_finite
from gmts_core.stats.metrics import TokenStats, token_stats_chunked


class StatsWhileSampling(StoppingCriteria):
    """Collects each sampled token's statistics during one ``generate`` call (a context
    manager: the hooks exist only inside ``with``)."""

    def __init__(self, model: Any, temperature: float, top_k: int, chunk_size: int) -> None:
        self.path = head_path(model)  # the head and its post-head transforms (scale, soft-cap)
        self.head = self.path.head
        self.temperature, self.top_k, self.chunk_size = temperature, top_k, chunk_size
        self.steps: list[TokenStats] = []  # one per decoding step, fields (B,) or (B, K)
        self.norms: list[torch.Tensor] = []  # (B,) per step
        self._thread = threading.get_ident()
        self._logits: torch.Tensor | None = None
        self._norm: torch.Tensor | None = None
        self._handles: list[Any] = []
        self._stacked: list[torch.Tensor] | None = None

    def __enter__(self) -> StatsWhileSampling:
        if self.path.scale is None:  # the head's input and output, then the soft-cap (if any)
            self._handles = [
                self.head.register_forward_pre_hook(self._record_head_input),
                self.head.register_forward_hook(self._record_logits),
            ]
        else:
            # a scaled head: some models scale the hidden state before the head (MiniCPM3),
            # others the head's output (Granite, Cohere), so the head's output is not the same
            # quantity for all of them; HeadPath.logits on the body's output is (load-time probe)
            self._handles = [self.path.body.register_forward_hook(self._record_body_output)]
        return self

    def __exit__(self, *_exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _record_head_input(self, _module: Any, args: tuple[Any, ...]) -> None:
        if threading.get_ident() == self._thread:
            self._norm = args[0][:, -1].detach().float().norm(dim=-1)  # (B,)

    def _record_body_output(self, _module: Any, _args: Any, out: Any) -> None:
        if threading.get_ident() == self._thread:
            hidden = out[0][:, -1].detach()  # (B, D): the body's final hidden state
            self._norm = hidden.float().norm(dim=-1)  # (B,), as gmts_core.stats.forward measures it
            self._logits = self.path.logits(hidden)

    def _record_logits(self, _module: Any, _args: Any, out: torch.Tensor) -> None:
        if threading.get_ident() == self._thread:
            logits = out[:, -1].detach()  # (B, V): the last position predicts the next token
            softcap = self.path.softcap  # applied to the head's output, as the models do
            if softcap is not None:
                logits = torch.tanh(logits.float() / softcap) * softcap
            self._logits = logits

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        """Statistics of the tokens just appended (input_ids[:, -1]); never stops generation."""
        assert self._logits is not None and self._norm is not None, "no forward was recorded"
        tokens = input_ids[:, -1].to(self._logits.device)  # (B,)
        self.steps.append(
            token_stats_chunked(
                len(tokens),
                lambda sl: self._logits[sl],  # type: ignore[index]
                tokens,
                self.temperature,
                self.top_k,
                self.chunk_size,
            )
        )
        self.norms.append(self._norm)
        self._logits = self._norm = None
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def answer_stats(self, row: int, length: int) -> AnswerStats:
        """The statistics of row ``row``'s first ``length`` sampled tokens."""
        if self._stacked is None:  # each field (T, B) or (T, B, K), stacked once
            names = list(TokenStats.__dataclass_fields__)
            self._stacked = [torch.stack([getattr(st, n) for st in self.steps]) for n in names]
            self._stacked.append(torch.stack(self.norms))
        *fields, norms = (f[:length, row] for f in self._stacked)
        stats = TokenStats(*fields)
        check_finite(stats)
        return AnswerStats(stats, norms)
