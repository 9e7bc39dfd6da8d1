"""Duplicate keys in a JSON body are refused (422), not resolved by "the last one wins".

``{"ratio": 0.2, "ratio": 0.9}`` is legal JSON, but which value the client meant is unknown; a
client that sends it has a bug. :func:`duplicate_key` parses the body once with an
``object_pairs_hook`` that notices a repeated key and names it with its path.
"""

from __future__ import annotations

import json
from typing import Any


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen[key] = value
    return seen


def duplicate_key(body: bytes) -> str | None:
    """The first key that appears twice in one object of the JSON ``body`` (None: no key does,
    or the body is not JSON at all, which the route's own parser then reports)."""
    try:
        json.loads(body, object_pairs_hook=_pairs_hook)
    except _Duplicate as exc:
        return exc.key
    except (ValueError, RecursionError):
        return None
    return None


def is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")
