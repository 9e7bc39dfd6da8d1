"""Limits policies: how large a request a front end may run. The HTTP API and the UI run under
the server's ``GMTS_*`` limits (:meth:`LimitsPolicy.server`); the CLI, on the user's own
machine, under its own larger ones (:meth:`LimitsPolicy.cli`). A service core takes the policy
as an argument and applies it before any model work; the checks themselves (a reference that
is no number, an unknown method) are the same under every policy."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.config import Settings


@dataclass(frozen=True)
class LimitsPolicy:
    """Request limits (each named by the ``GMTS_*`` setting it comes from, for the messages)."""

    max_groups: int
    max_answers: int
    max_prompt_chars: int
    max_answer_chars: int
    max_new_tokens: int
    max_total_tokens: int
    max_top_alternatives: int
    reward_budget_s: float
    any_model_source: bool = False  # any local folder or hub id, not only the allowed roots
    label: str = "this server's limit"

    @classmethod
    def server(cls, s: Settings) -> LimitsPolicy:
        """The server's limits (the API and the UI)."""
        return cls(
            s.max_groups,
            s.max_answers,
            s.max_prompt_chars,
            s.max_answer_chars,
            s.max_new_tokens,
            s.max_total_tokens,
            s.max_top_alternatives,
            s.reward_budget_s,
        )

    @classmethod
    def cli(cls, s: Settings) -> LimitsPolicy:
        """The CLI's own limits: the user's machine, the user's time. Large enough for any real
        rollout file; still finite, so a typo (``-n 1000000``) fails at once."""
        server = cls.server(s)
        return cls(
            max_groups=max(server.max_groups, 100_000),
            max_answers=max(server.max_answers, 1_000_000),
            max_prompt_chars=max(server.max_prompt_chars, 10_000_000),
            max_answer_chars=max(server.max_answer_chars, 10_000_000),
            max_new_tokens=max(server.max_new_tokens, 65_536),
            max_total_tokens=max(server.max_total_tokens, 1 << 30),
            max_top_alternatives=max(server.max_top_alternatives, 100),
            reward_budget_s=max(server.reward_budget_s, 3600.0),
            any_model_source=True,
            label="the CLI's limit",
        )
