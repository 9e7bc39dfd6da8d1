"""Example request bodies shown in the OpenAPI docs (each one works on the bundled model)."""

from __future__ import annotations

from typing import Any

ANALYZE_EXAMPLES: dict[str, dict[str, Any]] = {
    "sampled": {
        "summary": "Sample 8 answers and reward them with a numeric rule",
        "value": {
            "model": "tiny-arith",
            "prompt": "Q: 47+38=?\nA:",
            "num_samples": 8,
            "temperature": 1.0,
            "max_new_tokens": 40,
            "seed": 0,
            "reward": {"kind": "numeric", "reference": "85"},
            "selection": {"ratio": 0.2, "scope": "batch", "methods": ["entropy", "gmts"]},
        },
    },
    "given": {
        "summary": "Analyze given answers with explicit rewards",
        "value": {
            "prompt": "Q: 47+38=?\nA:",
            "answers": [
                " 7+8=15 carry 1, 4+3+1=8, answer 85",
                " 7+8=15, 4+3=7, answer 75",
            ],
            "rewards": [1, 0],
            "advantage": "grpo",
            "loss_aggregation": "token_mean",
            "top_alternatives": 3,
        },
    },
    "batch": {
        "summary": "A batch of two groups, selection across the whole batch",
        "value": {
            "groups": [
                {
                    "prompt": "Q: 47+38=?\nA:",
                    "num_samples": 4,
                    "reward": {"kind": "numeric", "reference": "85"},
                },
                {
                    "prompt": "Q: 23+14=?\nA:",
                    "num_samples": 4,
                    "reward": {"kind": "numeric", "reference": "37"},
                },
            ],
            "max_new_tokens": 40,
            "selection": {"ratio": 0.2, "scope": "batch"},
        },
    },
}
