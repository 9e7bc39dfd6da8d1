"""What a token view says about a trainer's dump (pure, no Gradio): a token the trainer did not
train, the numbers the dump logged for a token (beside the recomputed ones), and the
train/inference mismatch as a colour statistic.

A token's JSON (``TokenOut`` / ``LoggedToken``) carries ``trained`` (its loss mask) and, where
the dump logs per-token numbers, ``logged``: the dump's columns plus ``logprob_diff`` (log
pi_trainer - log pi_inference, nats) and ``importance_ratio``. Without a logged
``trainer_logprob`` the difference's trainer side is the model's recomputed log-prob.
"""

from __future__ import annotations

import math
from typing import Any

Json = dict[str, Any]

UNTRAINED_TEXT = (
    "not trained: loss mask 0 in the trainer's dump (a tool output, an environment or template "
    "token) — shown for its text, never selected, counted in no budget or summary"
)
# the dump's names -> the words a tooltip uses
LOGGED_NAMES = {
    "entropy": "entropy H",
    "trainer_logprob": "log p trainer",
    "inference_logprob": "log p inference",
    "rollout_log_probs": "log p rollout",
    "advantage": "advantage A",
    "mismatch_kl": "mismatch KL",
}


def untrained(tok: Json) -> bool:
    return tok.get("trained") is False


def logprob_diff(tok: Json) -> float | None:
    """|Δ log p| = |log pi_trainer - log pi_inference| (None: the dump has no inference side)."""
    d = (tok.get("logged") or {}).get("logprob_diff")
    return None if d is None or untrained(tok) else abs(float(d))


def ratio_distance(tok: Json) -> float | None:
    """|r - 1| of the importance ratio r = pi_trainer / pi_inference."""
    r = (tok.get("logged") or {}).get("importance_ratio")
    return None if r is None or untrained(tok) else abs(float(r) - 1.0)


def _num(x: Any) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.4g}".replace("-", "−")


def logged_lines(tok: Json) -> list[str]:
    """The tooltip's lines about the dump: what it logged, beside what GMTS recomputed where
    the token has both (``recomputed``: the analysis's entropy and log-prob), and the
    mismatch, saying whether its trainer side is logged or recomputed."""
    logged = tok.get("logged")
    if not logged:
        return []
    recomputed = tok.get("grad_norm") is not None  # an analysis with the model
    shown = []
    for name, label in LOGGED_NAMES.items():
        if name not in logged:
            continue
        beside = ""
        if recomputed and name in ("entropy", "trainer_logprob"):
            mine = tok.get("entropy" if name == "entropy" else "logprob")
            beside = f" (GMTS recomputed {_num(mine)})"
        shown.append(f"{label} {_num(logged[name])}{beside}")
    lines = ["logged by the trainer: " + " · ".join(shown)] if shown else []
    if "logprob_diff" in logged:
        side = "logged" if "trainer_logprob" in logged else "recomputed by the model"
        lines.append(
            f"mismatch: Δ log p (trainer − inference) {_num(logged['logprob_diff'])} nats · "
            f"importance ratio {_num(logged.get('importance_ratio'))} (trainer side {side})"
        )
    return lines
