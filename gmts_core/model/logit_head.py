"""The LM-head path: final hidden states -> the model's own logits, in one place.

The statistics, the RL loss and the trainers apply the LM head themselves, only at the positions
that predict answer tokens (full-vocabulary logits for every position would not fit in memory
for long answers). Several architectures transform the head's output before returning logits;
leaving a transform out would measure (and train) a different distribution from the one
``model(...).logits`` and ``generate`` use. The known post-head transforms, applied in this
order as the models do:

    scale     z * logit_scale           Cohere, Cohere2 (``logit_scale``)
              z / logits_scaling        Granite family, MiniCPM3 (``logits_scaling``)
              z * logits_scaling        HyperCLOVA X
              z * lm_head_multiplier    Falcon-H1
              z * output_multiplier     Muse family (before its soft-cap)
    soft-cap  c * tanh(z / c)           Gemma 2/3, VaultGemma, nanochat
                                        (``final_logit_softcapping``), RecurrentGemma
                                        (``logits_soft_cap``)

Anything else is caught by :func:`check_head_path`: it compares this path with the model's own
forward on a short probe and raises :class:`UnsupportedArchitectureError` naming the
architecture when they differ, so no statistic is ever computed on the wrong distribution.
:func:`gmts_core.model.loading.load_model` runs it on every model it loads.

Transforms run in float32 (as Gemma-style models do for their soft-cap); for float32 models the
result equals ``model(...).logits`` up to float rounding.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from gmts_core.errors import ModelLoadError

logger = logging.getLogger(__name__)

PROBE_LENGTH = 8  # tokens of the load-time probe
# max |tool - model| <= tol * (1 + max |model logits|): float rounding passes, a missing x2 or
# x0.25 scale or a missing soft-cap on large logits does not
PROBE_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8}
PROBE_TOLERANCE_LOW_PRECISION = 3e-2  # bf16 / fp16


class UnsupportedArchitectureError(ModelLoadError):
    """The model transforms its logits in a way this tool does not reproduce."""

    code = "unsupported_architecture"


@dataclass(frozen=True)
class HeadPath:
    """body(ids) -> hidden states; :meth:`logits` (hidden -> the model's logits)."""

    body: Any  # the transformer body: returns final hidden states first
    head: Any  # the output embedding (a Linear)
    scale: float | None  # multiply the head's output by this (None: no scaling)
    softcap: float | None  # c of c * tanh(z / c) (None: none)
    architecture: str

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The model's logits (..., V) at final hidden states (..., D); float32 when transformed."""
        return self.transform(self.head(hidden))

    def transform(self, z: torch.Tensor) -> torch.Tensor:
        """The post-head transform of the head's output ``z`` (..., V): the model's logits."""
        if self.scale is not None:
            z = z.float() * self.scale
        if self.softcap is not None:
            z = torch.tanh(z.float() / self.softcap) * self.softcap
        return z

    def describe(self) -> str:
        parts = [f"x {self.scale:g}"] if self.scale is not None else []
        parts += [f"soft-cap {self.softcap:g}"] if self.softcap is not None else []
        return ", ".join(parts) or "none"


def _config_value(config: Any, name: str) -> Any:
    """``name`` from the config or its text config (multimodal wrappers keep it there)."""
    value = getattr(config, name, None)
    if value is None and hasattr(config, "get_text_config"):
        value = getattr(config.get_text_config(), name, None)
    return value


def _scale(model: Any) -> float | None:
    """The product of the known multiplicative transforms after the head (None: none)."""
    config = model.config
    factors = []
    cohere = getattr(model, "logit_scale", None)  # Cohere keeps it on the module
    if isinstance(cohere, int | float) and not isinstance(cohere, bool):
        factors.append(float(cohere))
    granite = _config_value(config, "logits_scaling")
    if granite is not None:  # Granite, MiniCPM3 divide; HyperCLOVA X multiplies
        hyperclova = getattr(config, "model_type", "") == "hyperclovax"
        factors.append(float(granite) if hyperclova else 1.0 / float(granite))
    falcon = getattr(getattr(model, model.base_model_prefix, None), "lm_head_multiplier", None)
    if isinstance(falcon, int | float) and not isinstance(falcon, bool):
        factors.append(float(falcon))
    muse = _config_value(config, "output_multiplier")
    if muse is not None:
        factors.append(float(muse))
    if not factors:
        return None
    product = 1.0
    for f in factors:
        product *= f
    return product


def _softcap(config: Any) -> float | None:
    for name in ("final_logit_softcapping", "logits_soft_cap"):
        value = _config_value(config, name)
        if value is not None:
            return float(value)
    return None


def head_path(model: Any) -> HeadPath:
    """The body, head and post-head transform of a causal LM (PEFT-wrapped models too)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT
    body = getattr(inner, inner.base_model_prefix, None)
    if body is None or body is inner:
        raise UnsupportedArchitectureError(
            f"{type(inner).__name__}: cannot find the transformer body (base_model_prefix "
            f"{inner.base_model_prefix!r}) whose hidden states feed the LM head"
        )
    return HeadPath(
        body=body,
        head=inner.get_output_embeddings(),
        scale=_scale(inner),
        softcap=_softcap(inner.config),
        architecture=type(inner).__name__,
    )


def _probe_ids(model: Any) -> torch.Tensor:
    vocab = int(model.get_output_embeddings().weight.shape[0])
    ids = [(7 + 13 * i) % vocab for i in range(PROBE_LENGTH)]  # varied, inside any vocabulary
    return torch.tensor([ids], device=next(model.parameters()).device)  # (1, T)


def probe_difference(model: Any) -> tuple[float, float]:
    """(max |tool - model| logits, max |model| logits) on a short probe, in float32."""
    path = head_path(model)
    ids = _probe_ids(model)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        hidden = path.body(input_ids=ids, attention_mask=mask, use_cache=False)[0]  # (1, T, D)
        ours = path.logits(hidden).float()  # (1, T, V)
        theirs = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
    return _max_difference(ours, theirs)


def _max_difference(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[float, float]:
    """(max |ours - theirs|, max |theirs|) over finite entries; non-finite entries must sit at
    the same places (a model with NaN logits is refused later, by the statistics, by name)."""
    if ours.shape != theirs.shape:
        return float("inf"), 0.0
    finite = torch.isfinite(theirs)
    if not torch.equal(finite, torch.isfinite(ours)):
        return float("inf"), 0.0
    if not bool(finite.any()):
        return 0.0, 0.0
    return float((ours - theirs)[finite].abs().max()), float(theirs[finite].abs().max())


def check_head_path(model: Any) -> HeadPath:
    """The model's :class:`HeadPath`, verified against its own forward on a probe.

    Raises UnsupportedArchitectureError (naming the architecture) when they differ.
    """
    path = head_path(model)
    dtype = next(model.parameters()).dtype
    tol = PROBE_TOLERANCE.get(dtype, PROBE_TOLERANCE_LOW_PRECISION)
    try:
        diff, size = probe_difference(model)
    except (TypeError, ValueError, RuntimeError, IndexError, AttributeError) as exc:
        raise UnsupportedArchitectureError(
            f"{path.architecture}: cannot run the LM-head probe ({exc}); this tool applies the "
            "LM head itself and cannot verify it matches this model's forward"
        ) from exc
    if not diff <= tol * (1.0 + size):
        raise UnsupportedArchitectureError(
            f"{path.architecture} transforms its logits in a way this tool does not reproduce "
            f"(known transforms applied: {path.describe()}; max logit difference {diff:.3g} on "
            f"logits of size {size:.3g}); its token statistics would be wrong, so it is refused"
        )
    _check_generation(model, path, tol)
    logger.info("LM-head path of %s verified (%s)", path.architecture, path.describe())
    return path


def generation_difference(model: Any) -> tuple[float, float]:
    """(max |generate's logits - teacher-forced head-path logits|, max |logits|) over two greedy
    steps after the probe: does ``generate`` sample from the distribution the analysis reports?

    Some models condition generation on extra inputs (XLM appends a mask token), so the answer
    they sample is not scored by the context the analysis and the RL loss use.
    """
    path = head_path(model)
    ids = _probe_ids(model)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=2,
            min_new_tokens=2,
            eos_token_id=None,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
        )
        generated = torch.stack([lg[0] for lg in out.logits]).float()  # (2, V)
        seq = out.sequences  # (1, T + 2)
        hidden = path.body(input_ids=seq, attention_mask=torch.ones_like(seq), use_cache=False)[0]
        forced = path.logits(hidden[0, ids.shape[1] - 1 : -1]).float()  # (2, V)
    return _max_difference(generated, forced)


def _check_generation(model: Any, path: HeadPath, tol: float) -> None:
    """Refuse a model whose ``generate`` samples from other logits than the analysis reports;
    a model whose ``generate`` fails is kept (given answers still work) with a warning."""
    if not hasattr(model, "generate"):
        return
    try:
        diff, size = generation_difference(model)
    except Exception as exc:  # noqa: BLE001 - the model's own generate: any failure
        logger.warning(
            "%s: generate fails on a probe (%s); sampling will fail", path.architecture, exc
        )
        return
    if not diff <= tol * (1.0 + size):
        raise UnsupportedArchitectureError(
            f"{path.architecture} samples with generate() from other logits than its forward "
            f"gives for the same tokens (max difference {diff:.3g}); the statistics of sampled "
            "answers would not be those of the distribution they were sampled from, so it is "
            "refused"
        )
