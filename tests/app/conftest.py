"""Fixtures for the app tests: tiny random models under an allowed root, settings, clients.

Every app here uses small limits and one torch thread so each request is fast on 2 CPU cores.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.main import create_app
from tests.app.api_helpers import TINY, make_settings
from tests.tiny_models import save_tiny_model


@pytest.fixture(scope="session")
def model_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An allowed model root holding a tiny random Llama (``tiny-llama``)."""
    root = tmp_path_factory.mktemp("models")
    save_tiny_model(root / TINY, "llama")
    return root


@pytest.fixture
def settings(model_root: Path) -> Settings:
    return make_settings(model_root)


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c
