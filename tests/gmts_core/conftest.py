"""``native_path``: runs a test twice, with the native kernels (``gmts_core.native``) and with
PyTorch's ops, so that both paths (token statistics, the fused decoding step's attention) meet
the same checks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gmts_core import native


@pytest.fixture(params=["native", "eager"])
def native_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "native":
        if native.library() is None:
            pytest.skip("no C compiler here: the native kernels are not built")
        monkeypatch.setenv("GMTS_NATIVE", "1")
    else:
        monkeypatch.setenv("GMTS_NATIVE", "0")
    yield request.param
