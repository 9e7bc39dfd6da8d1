"""Shared fixtures: tiny random Llama / Qwen2 / GPT-2 model folders, built once per session.

Each folder holds a ~30k-parameter random model in safetensors with a locally built tokenizer
(tests/tiny_models.py), so no test downloads anything. Loaded models are cached per session;
tests must not mutate them (base models are loaded with requires_grad False).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

# servers built from default settings save sessions under $XDG_STATE_HOME/gmts: keep the tests'
# (and their subprocess servers') out of the user's home
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="gmts-test-state-")

from gmts_core.model.loading import LoadedModel, load_model
from tests.file_order import longest_first, recorded_seconds
from tests.tiny_models import save_tiny_model

# Tiny models gain nothing from intra-op threads; on a busy 2-core CI machine the thread pool's
# barriers stall every small op (a 32x400 matmul took 80 ms with 2 threads). Set when this file
# is imported, before collection: collecting tests/gmts_core/model/test_arch_conformance.py builds
# and probes a tiny model of every architecture.
torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="module")
def _no_event_loop_left_running(request: pytest.FixtureRequest) -> None:
    """Each test file starts with no event loop running in the worker's main thread. Files reach
    a worker in any order, so a loop that one file leaves running (an open sync Playwright's)
    breaks a later file's `asyncio.run` or `anyio.run` ("Already running asyncio")."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    pytest.fail(
        f"{request.node.nodeid} starts with {loop!r} running in the worker's main thread"
        " (left by an earlier file, or opened by a session-scoped fixture)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Whole test files, longest first, so both workers finish together (tests/file_order.py)."""
    items[:] = longest_first(items, recorded_seconds())


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_model_dir(arch)``: the folder of a tiny random model, built on first use."""
    root = tmp_path_factory.mktemp("tiny-models")
    built: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in built:
            built[arch] = save_tiny_model(root / f"tiny-{arch}", arch)
        return built[arch]

    return get


@pytest.fixture(scope="session")
def tiny_lm(tiny_model_dir: Callable[[str], Path]) -> Callable[[str], LoadedModel]:
    """``tiny_lm(arch)``: the loaded tiny model (float32 on CPU), loaded once per session."""
    loaded: dict[str, LoadedModel] = {}

    def get(arch: str) -> LoadedModel:
        if arch not in loaded:
            loaded[arch] = load_model(
                tiny_model_dir(arch), name=f"tiny-{arch}", device="cpu", dtype="float32"
            )
        return loaded[arch]

    return get


@pytest.fixture(scope="session")
def tiny_llama_dir(tiny_model_dir: Callable[[str], Path]) -> Path:
    return tiny_model_dir("llama")


@pytest.fixture(scope="session")
def tiny_llama(tiny_lm: Callable[[str], LoadedModel]) -> LoadedModel:
    return tiny_lm("llama")
