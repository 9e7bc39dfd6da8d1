"""The services over the shipped test runs (tests/data/runs), shared by the Runs tab's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.services.container import build_services
from tests.app.api_helpers import make_settings

DATA = Path(__file__).resolve().parents[4] / "data" / "runs"


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    settings = make_settings(
        tmp_path_factory.mktemp("m"), run_roots=[DATA], default_model="tiny-arith"
    )
    return build_services(settings)
