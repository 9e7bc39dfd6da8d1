"""The config dataclasses that need nothing but the knobs: how a group is sampled, how a
trainable policy is built, and how the demo model is trained and evaluated.

They import only the standard library and :mod:`gmts_core.knobs` (no torch, no transformers),
so a front end can read their knobs (help, bounds, defaults) without the model stack: ``gmts
<command> --help`` draws its options from them. The modules that use them
(:mod:`gmts_core.sampling.answers`, :mod:`gmts_core.grpo.policy`, :mod:`gmts_core.demo`) import
them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from gmts_core.bounds import MAX_SEED
from gmts_core.errors import InvalidInputError
from gmts_core.knobs import knob, knob_factory


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample a group. temperature 0 means greedy decoding."""

    num_samples: int = knob(8, "Answers sampled per prompt (the group size G).", ge=1, le=1024)
    temperature: float = knob(1.0, "Sampling temperature (0: greedy decoding).", ge=0, le=100)
    top_p: float = knob(
        1.0, "Nucleus sampling: keep the most likely tokens up to this mass.", gt=0, le=1
    )
    top_k: int = knob(0, "Sample among the k most likely tokens (0: all of them).", ge=0)
    max_new_tokens: int = knob(64, "Longest sampled answer, in tokens.", ge=1, le=65_536)
    seed: int = knob(0, "Sampling seed.", ge=0, le=MAX_SEED)


POLICY_KINDS = ("auto", "full", "lora")
DEFAULT_LORA_THRESHOLD = 100_000_000  # parameters; larger base models get a LoRA policy


@dataclass(frozen=True)
class PolicySettings:
    """How a session's trainable policy is built (:mod:`gmts_core.grpo.policy`)."""

    kind: str = knob(
        "auto", "full (a copy), lora, or auto: a full copy up to lora_threshold parameters."
    )
    lora_threshold: int = knob(
        DEFAULT_LORA_THRESHOLD, "Parameters above which auto picks LoRA.", ge=0
    )
    lora_rank: int = knob(8, "LoRA rank.", ge=1, le=4096)
    lora_alpha: int = knob(16, "LoRA alpha (the adapter's scale is alpha / rank).", ge=1)
    lora_target_modules: str | tuple[str, ...] = knob(
        "all-linear", "Modules LoRA adapts (peft's target_modules)."
    )
    seed: int = knob(0, "Seed of the LoRA A matrices.", ge=0)
    # a token's embedding is shared by every context it appears in, so RL updates to it move
    # every sequence
    freeze_embeddings: bool = knob(
        False, "Full copies: keep the token embeddings (and a tied LM head) frozen."
    )

    def validate(self) -> None:
        if self.kind not in POLICY_KINDS:
            raise InvalidInputError(
                f"unknown policy kind {self.kind!r}; valid: {', '.join(POLICY_KINDS)}"
            )
        if self.lora_rank < 1:
            raise InvalidInputError(f"lora_rank must be >= 1, got {self.lora_rank}")

    def resolve_kind(self, num_parameters: int) -> str:
        if self.kind != "auto":
            return self.kind
        return "lora" if num_parameters > self.lora_threshold else "full"


@dataclass(frozen=True)
class DemoEvalConfig:
    """What to evaluate on: ``num_prompts`` held-out problems drawn with ``sampling.seed``, each
    sampled as ``sampling`` says (problem i with seed ``sampling.seed + i``)."""

    num_prompts: int = knob(64, "Held-out problems evaluated.", ge=1, le=10_000)
    sampling: SamplingConfig = knob(
        SamplingConfig(num_samples=8, max_new_tokens=48),
        "How each problem's group is sampled (G answers, at most 48 tokens: the demo's answers "
        "are about 23).",
    )
    top_ratio: float = knob(
        0.2, "Share of tokens counted as top entropy (the 80/20 rule's 20%).", gt=0, le=1
    )
    num_threads: int = knob(
        1, "Torch CPU threads (one: reproducible, and fastest on a small shared CPU).", ge=1
    )

    @property
    def group_size(self) -> int:
        return self.sampling.num_samples


@dataclass(frozen=True)
class FlawMix:
    """How often training solutions are flawed, and which mistake a flawed one makes.

    ``weights`` are relative; mistakes that do not apply to a problem (a carry mistake on a
    problem without a carry) are left out before normalising.
    """

    flaw_rate: float = knob(
        0.45, "Share of training solutions with exactly one plausible mistake.", ge=0, le=1
    )
    weights: dict[str, float] = knob_factory(
        lambda: {
            "forgot_carry": 0.5,
            "carry_not_added": 0.2,
            "units_slip": 0.15,
            "tens_slip": 0.15,
        },
        "Relative weight of each kind of mistake in a flawed solution.",
    )


@dataclass(frozen=True)
class ModelShape:
    """The Llama configuration of the demo model."""

    hidden_size: int = knob(64, "Hidden size.", ge=1)
    intermediate_size: int = knob(192, "MLP size.", ge=1)
    num_hidden_layers: int = knob(3, "Transformer layers.", ge=1)
    num_attention_heads: int = knob(4, "Attention heads (divides the hidden size).", ge=1)
    max_position_embeddings: int = knob(64, "Longest sequence, in tokens.", ge=1)


@dataclass(frozen=True)
class TrainConfig:
    """Every knob of a demo-model training run; the defaults are the shipped recipe."""

    seed: int = knob(0, "Seed of the data stream and the weights.", ge=0)
    steps: int = knob(500, "Optimizer steps.", ge=1, le=1_000_000)
    batch_size: int = knob(128, "Examples per step.", ge=1, le=65_536)
    lr: float = knob(3e-3, "Peak learning rate (after warm-up, then cosine decay).", gt=0, le=1)
    min_lr_ratio: float = knob(0.1, "Final learning rate as a share of the peak.", ge=0, le=1)
    warmup_steps: int = knob(50, "Linear learning-rate warm-up steps.", ge=0)
    weight_decay: float = knob(0.01, "AdamW weight decay.", ge=0, le=1)
    grad_clip: float = knob(1.0, "Gradient-norm clipping.", gt=0)
    num_threads: int = knob(
        1, "Torch CPU threads (one: deterministic, and fastest on a small shared CPU).", ge=1
    )
    mix: FlawMix = knob_factory(FlawMix, "How often and how the training solutions are flawed.")
    shape: ModelShape = knob_factory(ModelShape, "The Llama configuration of the model.")
