"""Numbers in response bodies: JSON cannot carry NaN or infinity, so a non-finite float in a
response is null (the one rule every response model follows)."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
)


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


# JSON cannot carry NaN or infinity: a non-finite number in a response is null
Num = Annotated[float | None, BeforeValidator(_finite_or_none)]
