"""The default example: the small batch the Explore tab opens on, defined once.

It is chosen so that entropy and GMTS visibly disagree on the bundled demo model: a group whose
answers are all right (every advantage 0, a zero-signal group) next to groups whose answers
split, analysed with selection scope ``batch`` as trainers select. Entropy then spends part of
its budget on the zero-signal group's tokens, where the gradient is exactly 0, and GMTS does
not. ``scripts/choose_default_example.py`` searched the sampling seeds for such a batch (see
:func:`disagreement_score`) and stored the chosen definition in ``static/default-example.json``
and its analysis (the ``POST /v1/analyze`` body) in ``static/default-example-result.json``; a
test checks that the stored analysis still matches a fresh one. Every front end that shows the
default example (the Explore tab, the server-rendered first view) reads
:func:`default_example_request` and :func:`load_default_example`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gmts_core.config import AnalysisConfig
from gmts_core.knobs import knob_default
from gmts_core.sampling.answers import SamplingConfig

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parents[2] / "static"
DEFINITION_PATH = STATIC_DIR / "default-example.json"
RESULT_PATH = STATIC_DIR / "default-example-result.json"
# the methods the default example is analysed with (Method A/B switch among them without a re-run);
# each one more adds its scores, ranks and flags to every token of the first page
DEFAULT_EXAMPLE_METHODS = ("entropy", "gmts", "gmts_paper", "random")


@dataclass(frozen=True)
class DefaultExample:
    """A batch of demo prompts, sampled with one seed, analysed with batch-scope selection."""

    prompts: tuple[tuple[str, str], ...]  # (prompt, numeric reference) per group
    seed: int
    group_size: int = 8
    temperature: float = knob_default(SamplingConfig, "temperature")
    max_new_tokens: int = 48
    ratio: float = knob_default(AnalysisConfig, "ratio")
    scope: str = knob_default(AnalysisConfig, "scope")
    top_alternatives: int = 3
    methods: tuple[str, ...] = DEFAULT_EXAMPLE_METHODS
    chosen_by: dict[str, Any] = field(default_factory=dict, compare=False)

    def request(self) -> dict[str, Any]:
        """The ``POST /v1/analyze`` body of the example."""
        return {
            "groups": [
                {"prompt": p, "reward": {"kind": "numeric", "reference": r}}
                for p, r in self.prompts
            ],
            "num_samples": self.group_size,
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
            "temperature": self.temperature,
            "selection": {"ratio": self.ratio, "scope": self.scope, "methods": list(self.methods)},
            "top_alternatives": self.top_alternatives,
        }

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["prompts"] = [list(p) for p in self.prompts]
        d["methods"] = list(self.methods)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DefaultExample:
        return cls(
            prompts=tuple((str(p), str(r)) for p, r in d["prompts"]),
            seed=int(d["seed"]),
            group_size=int(d.get("group_size", 8)),
            temperature=float(d.get("temperature", cls.temperature)),
            max_new_tokens=int(d.get("max_new_tokens", 48)),
            ratio=float(d.get("ratio", cls.ratio)),
            scope=str(d.get("scope", cls.scope)),
            top_alternatives=int(d.get("top_alternatives", 3)),
            methods=tuple(d.get("methods", DEFAULT_EXAMPLE_METHODS)),
            chosen_by=dict(d.get("chosen_by", {})),
        )


def default_example(path: Path = DEFINITION_PATH) -> DefaultExample:
    """The stored default example's definition."""
    return DefaultExample.from_json(json.loads(path.read_text(encoding="utf-8")))


def default_example_request(path: Path = DEFINITION_PATH) -> dict[str, Any]:
    """The ``POST /v1/analyze`` body whose result the Explore tab opens on."""
    return default_example(path).request()


def load_default_example(path: Path = RESULT_PATH) -> dict[str, Any] | None:
    """The stored default example's analysis (the ``POST /v1/analyze`` body), or None if
    unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("no default example for the first screen (%s): %s", path, exc)
        return None
    ok = isinstance(data, dict) and (data.get("groups") or data.get("answers"))
    return data if ok else None


def disagreement_score(result: dict[str, Any], a: str = "entropy", b: str = "gmts") -> float:
    """How visibly ``a`` and ``b`` disagree in an analysis body: ``a``'s wasted share plus the
    share of tokens only one of them selects (1 - Jaccard); 0 unless exactly one group is
    zero-signal and the others carry signal (the contrast the default example should show, in a
    batch that looks like a trainer's: most groups split)."""
    s = result["summary"]
    groups = result.get("groups") or []
    zero = sum(bool(g["summary"]["zero_signal"]) for g in groups)
    if zero != 1 or len(groups) < 2:
        return 0.0
    overlap = s["overlap"].get(f"{a}|{b}") or s["overlap"].get(f"{b}|{a}")
    return float(s["wasted_share"][a]) + (1.0 - float(overlap["jaccard"]))
