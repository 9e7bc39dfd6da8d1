"""Exact per-token gradients of the GRPO loss over every parameter of the model.

For answer i and token t the loss term is l_it = -w_i A_i log pi(y_it); G_t = d l_t / d theta over
every parameter (a tied embedding/head matrix counted once). :func:`exact_token_gradients` keeps
||G_t||, the head part gamma_t ||h_t||, and the running sums g_S of each selection, for
:mod:`gmts_core.experiments.gradcheck`'s fidelity report.

Method: one forward per answer through ``torch.func.functional_call`` on detached copies of the
parameters (the base model is never touched, its parameters need no grad), then one vmapped
backward (``autograd.grad(..., is_grads_batched=True)``) per block of tokens: the block's B
per-token gradients exist at once (B * P numbers, bounded by ``batch_elements``), and we keep
only their squared norms and the running sums g_S per method. Tokens of answers with A_i = 0
have zero gradients and need no backward."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import functional_call

from gmts_core.errors import InvalidInputError

logger = logging.getLogger(__name__)

DEFAULT_BATCH_ELEMENTS = 2**26  # per-token gradient numbers held at once (256 MiB in float32)

PRECISIONS: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class TokenGradients:
    """Exact per-token gradient quantities of N answer tokens in flat (answer, position) order."""

    true_norm: torch.Tensor  # (N,) float64 ||d l_t / d theta||
    head_norm: torch.Tensor  # (N,) float64 gamma_t ||h_t|| (output-projection part)
    head_param_norm: torch.Tensor  # (N,) float64 ||d l_t / d W_out|| by autograd (all paths)
    logprob: torch.Tensor  # (N,) float64 log pi(y_t) recomputed in the compute precision
    selected_norm: dict[str, float]  # ||g_S|| per mask
    selected_dot_full: dict[str, float]  # <g_S, g> per mask
    full_norm: float  # ||g||, g = dL/dtheta
    num_parameters: int
    tied_embeddings: bool
    seconds: float


def _detached_params(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Leaf copies of the parameters (no storage copy when the dtype already matches)."""
    return {name: p.detach().to(dtype).requires_grad_(True) for name, p in model.named_parameters()}


def _head_param_index(model: Any) -> tuple[int, bool]:
    """Index of the output-embedding weight in ``named_parameters()``, and whether it is tied."""
    head = model.get_output_embeddings().weight
    by_id = {id(p): i for i, (_, p) in enumerate(model.named_parameters())}
    tied = head is model.get_input_embeddings().weight
    return by_id[id(head)], tied


def _answer_forward(
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    seq: tuple[list[int], list[int]],
    coef: float,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token losses (L,), head formula norms (L,) and log-probs (L,) of one answer."""
    prompt, answer = seq
    device = next(iter(params.values())).device
    ids = torch.tensor([prompt + answer], device=device)  # (1, T)
    out = functional_call(model, params, (ids,), {"use_cache": False, "output_hidden_states": True})
    start, n = len(prompt) - 1, len(answer)  # position t predicts token t + 1
    z = out.logits[0, start : start + n] / temperature  # (L, V)
    h = out.hidden_states[-1][0, start : start + n]  # (L, D) the input of the LM head
    targets = torch.tensor(answer, device=device)
    logp = z.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)  # (L,)
    with torch.no_grad():
        # d l / d z = -coef (e_y - pi) / tau, so ||d l / d W|| = |coef| ||e_y - pi|| ||h|| / tau
        delta = z.softmax(-1)
        delta[torch.arange(n, device=device), targets] -= 1.0
        head = abs(coef) * delta.norm(dim=-1) * h.norm(dim=-1) / temperature
    return -coef * logp, head.double(), logp.detach().double()


def _block_grads(
    losses: torch.Tensor, params: list[torch.Tensor], start: int, stop: int
) -> list[torch.Tensor]:
    """Gradients of losses[start:stop] w.r.t. each parameter, each (B, *param.shape)."""
    if stop - start == 1:
        grads = torch.autograd.grad(
            losses[start], params, retain_graph=True, materialize_grads=True
        )
        return [g.unsqueeze(0) for g in grads]
    eye = torch.eye(losses.numel(), dtype=losses.dtype, device=losses.device)[start:stop]
    try:
        return list(
            torch.autograd.grad(
                losses,
                params,
                grad_outputs=eye,
                retain_graph=True,
                is_grads_batched=True,
                materialize_grads=True,
            )
        )
    except RuntimeError as exc:  # an op without a vmap rule: fall back to one backward per token
        logger.warning("batched per-token backward failed (%s); using a loop", exc)
        per_token = [_block_grads(losses, params, t, t + 1) for t in range(start, stop)]
        return [torch.cat(parts) for parts in zip(*per_token, strict=True)]


class _Accumulator:
    """Per-token squared norms and the running gradient sums g_S of each mask (and of all).

    A block's products are formed in the compute precision (at most ``block`` terms each) and
    accumulated across blocks and parameters in float64.
    """

    def __init__(self, params: list[torch.Tensor], masks: torch.Tensor, head_index: int) -> None:
        # (M + 1, N) in the compute dtype; the last row is all ones (the full loss)
        self.masks_t = masks.T.to(params[0].dtype)
        self.head_index = head_index
        self.sums = [
            torch.zeros((masks.shape[1], *p.shape), dtype=torch.float64, device=p.device)
            for p in params
        ]  # each (M + 1, *param.shape)
        n = masks.shape[0]
        self.true_sq = torch.zeros(n, dtype=torch.float64)
        self.head_sq = torch.zeros(n, dtype=torch.float64)

    def add(self, rows: slice, grads: list[torch.Tensor]) -> None:
        sq = torch.zeros(rows.stop - rows.start, dtype=torch.float64, device=grads[0].device)
        masks_t = self.masks_t[:, rows]  # (M + 1, B)
        for i, (acc, g) in enumerate(zip(self.sums, grads, strict=True)):
            flat = g.flatten(1)  # (B, p)
            g_sq = torch.einsum("bp,bp->b", flat, flat).double()  # (B,)
            sq += g_sq
            if i == self.head_index:
                self.head_sq[rows] = g_sq.cpu()
            acc.view(acc.shape[0], -1).add_(masks_t @ flat)  # (M + 1, p)
        self.true_sq[rows] = sq.cpu()

    def gram(self) -> torch.Tensor:
        """(M + 1, M + 1) inner products <g_a, g_b> of the accumulated sums."""
        gram = torch.zeros(len(self.masks_t), len(self.masks_t), dtype=torch.float64)
        for acc in self.sums:
            flat = acc.view(acc.shape[0], -1)  # (M + 1, p)
            gram += (flat @ flat.T).cpu()
        return gram


@contextlib.contextmanager
def experts_for(model: torch.nn.Module, dtype: torch.dtype) -> Iterator[None]:
    """Mixture-of-experts models (Mixtral, Qwen2-MoE, ...) run their experts with a grouped
    matrix-multiply kernel that has no float64 version: in float64 the experts run eagerly
    (``set_experts_implementation("eager")``, restored afterwards). A model whose experts
    cannot be switched is refused with an error saying so."""
    config = getattr(model, "config", None)
    current = getattr(config, "_experts_implementation", None)
    if dtype != torch.float64 or current in (None, "eager"):
        yield
        return
    setter = getattr(model, "set_experts_implementation", None)
    try:
        if setter is None:
            raise ValueError("the model has no set_experts_implementation")
        setter("eager")
    except (ValueError, RuntimeError, ImportError) as exc:
        raise InvalidInputError(
            f"this model's experts run with the {current!r} kernel, which has no float64 "
            f"version, and cannot be switched to eager ({exc}); use --precision float32"
        ) from None
    try:
        yield
    finally:
        setter(current)


def exact_token_gradients(
    model: torch.nn.Module,
    sequences: Sequence[tuple[list[int], list[int]]],
    coefs: Sequence[float],
    temperature: float,
    masks: dict[str, torch.Tensor],
    precision: str = "float32",
    batch_elements: int = DEFAULT_BATCH_ELEMENTS,
) -> TokenGradients:
    """Exact per-token gradients of l_t = -coef_i log pi(y_t) for (prompt_ids, answer_ids) pairs.

    ``coefs``: w_i A_i per answer. ``masks``: name -> (N,) bool over the flat answer tokens;
    for each, g_S (the gradient of the loss restricted to the masked tokens) is accumulated.
    """
    if precision not in PRECISIONS:
        raise InvalidInputError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    started = time.perf_counter()
    params = _detached_params(model, PRECISIONS[precision])
    plist = list(params.values())
    head_index, tied = _head_param_index(model)
    num_params = sum(p.numel() for p in plist)
    block = max(1, batch_elements // max(num_params, 1))
    n = sum(len(a) for _, a in sequences)
    names = list(masks)
    columns = [masks[m].bool().cpu() for m in names] + [torch.ones(n, dtype=torch.bool)]
    acc = _Accumulator(plist, torch.stack(columns, dim=1).to(plist[0].device), head_index)
    head, logprob = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    offset = 0
    with experts_for(model, PRECISIONS[precision]), _float64_errors(precision):
        for seq, coef in zip(sequences, coefs, strict=True):
            length = len(seq[1])
            losses, head_norm, lp = _answer_forward(model, params, seq, float(coef), temperature)
            head[offset : offset + length], logprob[offset : offset + length] = (
                head_norm.cpu(),
                lp.cpu(),
            )
            for s in range(0, length if coef != 0 else 0, block):
                stop = min(s + block, length)
                acc.add(slice(offset + s, offset + stop), _block_grads(losses, plist, s, stop))
            offset += length
    gram = acc.gram()
    full = len(names)
    return TokenGradients(
        true_norm=acc.true_sq.sqrt(),
        head_norm=head,
        head_param_norm=acc.head_sq.sqrt(),
        logprob=logprob,
        selected_norm={m: math.sqrt(max(float(gram[i, i]), 0.0)) for i, m in enumerate(names)},
        selected_dot_full={m: float(gram[i, full]) for i, m in enumerate(names)},
        full_norm=math.sqrt(max(float(gram[full, full]), 0.0)),
        num_parameters=num_params,
        tied_embeddings=tied,
        seconds=time.perf_counter() - started,
    )


@contextlib.contextmanager
def _float64_errors(precision: str) -> Iterator[None]:
    """A kernel without a float64 version (a dtype error from inside the model) becomes an
    error naming the precision, not a raw traceback."""
    try:
        yield
    except RuntimeError as exc:
        text = str(exc)
        if precision != "float64" or not ("Double" in text or "float64" in text):
            raise
        raise InvalidInputError(
            f"this model does not run in float64 (a kernel of its forward has no float64 "
            f"version: {text.splitlines()[0][:160]}); use --precision float32"
        ) from None
