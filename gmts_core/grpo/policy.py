"""A trainable policy made from a loaded base model, which itself is never touched.

Two kinds, chosen by size or by setting:

- ``full``: a deep copy of the base model with every parameter trainable (small models such as
  the demo model; memory is about 4x the model with AdamW's state).
- ``lora``: a LoRA adapter (peft) on a *structural* copy of the base model whose weight tensors
  are the base's own, shared and frozen. Only the adapter trains; no weight memory is copied,
  and the base model's module tree never sees the adapter, so other users of the base model
  and other sessions are unaffected.

``reset()`` restores the starting weights bit for bit; ``reference()`` gives the frozen
reference model for the KL term (the base model, or the policy with its adapter disabled).
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from gmts_core.base_config import PolicySettings as PolicySettings
from gmts_core.model.loading import LoadedModel

logger = logging.getLogger(__name__)


def weights_checksum(model: torch.nn.Module) -> str:
    """SHA-256 over every parameter and buffer (names and bytes): equal iff bit-identical."""
    digest = hashlib.sha256()
    state = model.state_dict(keep_vars=False)
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(name.encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def _shared_weight_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of the module tree whose parameters and buffers are the original tensors."""
    memo: dict[int, Any] = {id(t): t for t in model.parameters()}
    memo.update({id(t): t for t in model.buffers()})
    return copy.deepcopy(model, memo)


def _lora_model(base: torch.nn.Module, settings: PolicySettings) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model  # heavy (~2 s to import): LoRA sessions only

    config = LoraConfig(
        r=settings.lora_rank,
        lora_alpha=settings.lora_alpha,
        lora_dropout=0.0,
        target_modules=(
            settings.lora_target_modules
            if isinstance(settings.lora_target_modules, str)
            else list(settings.lora_target_modules)
        ),
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        return get_peft_model(_shared_weight_copy(base), config)


class TrainablePolicy:
    """A policy to train with RL, made from (and isolated from) ``base``."""

    def __init__(self, base: LoadedModel, settings: PolicySettings | None = None) -> None:
        settings = settings or PolicySettings()
        settings.validate()
        self.base = base
        self.settings = settings
        self.kind = settings.resolve_kind(base.num_parameters)
        self.model: torch.nn.Module
        if self.kind == "full":
            self.model = copy.deepcopy(base.model)
            self.model.requires_grad_(True)
            if settings.freeze_embeddings:
                self.model.get_input_embeddings().requires_grad_(False)
                self.model.get_output_embeddings().requires_grad_(False)
        else:
            self.model = _lora_model(base.model, settings)
        self.model.eval()  # no dropout: a step is a deterministic function of its seed
        self._start = {n: p.detach().clone() for n, p in self._named_trainable()}
        logger.info(
            "made a %s policy of %s (%d trainable parameters)",
            self.kind,
            base.name,
            self.num_trainable,
        )

    def _named_trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for _, p in self._named_trainable()]

    @property
    def num_trainable(self) -> int:
        return sum(p.numel() for p in self.trainable_parameters())

    @property
    def tokenizer(self) -> Any:
        return self.base.tokenizer

    def as_loaded(self, name: str | None = None, beta: float = 0.0) -> LoadedModel:
        """The policy as a :class:`LoadedModel`, for :func:`gmts_core.analysis.analyze.analyze`,
        with
        its reference (the starting policy) and KL weight ``beta`` for the coefficient's KL term."""
        return LoadedModel(
            name or f"{self.base.name} (trained policy)",
            self.base.source,
            self.model,  # type: ignore[arg-type]
            self.base.tokenizer,
            reference=self.reference,
            reference_beta=beta,
        )

    @contextmanager
    def reference(self) -> Iterator[Any]:
        """The frozen reference model (the starting policy) for the KL term."""
        if self.kind == "full":
            yield self.base.model
        else:
            with self.model.disable_adapter():  # type: ignore[operator]
                yield self.model

    @torch.no_grad()
    def reset(self) -> None:
        """Restore the starting weights exactly (the optimizer is the caller's to reset)."""
        for name, param in self._named_trainable():
            param.copy_(self._start[name])

    def checksum(self) -> str:
        return weights_checksum(self.model)
