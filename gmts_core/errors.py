"""Typed library errors. Only the web layer maps them to HTTP status codes."""

from __future__ import annotations

from collections.abc import Iterable


class GMTSError(Exception):
    """Base class for every error gmts_core raises on purpose."""

    code = "gmts_error"


class InvalidInputError(GMTSError, ValueError):
    """The caller passed something the library cannot work with; the message says what."""

    code = "invalid_input"


class UnknownNameError(InvalidInputError):
    """A registry lookup failed; the message lists the valid names."""

    code = "unknown_name"

    def __init__(self, kind: str, name: str, valid: Iterable[str]) -> None:
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        super().__init__(f"unknown {kind} {name!r}; valid: {', '.join(self.valid)}")


class ModelNotFoundError(GMTSError, LookupError):
    """A model name resolves to no alias, allowed folder or hub id."""

    code = "model_not_found"


class ModelLoadError(GMTSError, RuntimeError):
    """A model exists but could not be loaded (corrupt weights, unsupported format...)."""

    code = "model_load_failed"


class NonFiniteLogitsError(GMTSError, ArithmeticError):
    """The model produced NaN or +inf logits; its statistics would be meaningless (a token at a
    -inf logit is not one: :func:`gmts_core.stats.forward.check_finite`)."""

    code = "non_finite_logits"


class LimitExceededError(GMTSError, ValueError):
    """A request is larger than a configured limit."""

    code = "limit_exceeded"
