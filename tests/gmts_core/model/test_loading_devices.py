"""load_model's device, dtype and device_map options (the paths large models take), on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gmts_core.errors import InvalidInputError
from gmts_core.model.loading import load_model, resolve_device, resolve_dtype
from tests.tiny_models import save_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny"), "qwen2")


@pytest.mark.parametrize(
    ("name", "expected"),
    [("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)],
)
def test_dtype_aliases(name: str, expected: torch.dtype) -> None:
    assert resolve_dtype(name, torch.device("cpu")) == expected


def test_unknown_dtype_and_device_are_input_errors() -> None:
    with pytest.raises(InvalidInputError, match="bfloat16"):
        resolve_dtype("float8", torch.device("cpu"))
    with pytest.raises(InvalidInputError, match="unknown device"):
        resolve_device("gpu0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_cuda_without_cuda_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="CUDA is not available"):
        resolve_device("cuda")


def test_bf16_with_device_map_auto_loads_and_runs(tiny: Path) -> None:
    lm = load_model(tiny, dtype="bf16", device_map="auto")
    assert lm.dtype == torch.bfloat16
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert lm.device.type == expected  # where the input embeddings live
    ids = torch.tensor([[1, 2, 3]], device=lm.device)
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits  # (1, 3, V)
    assert logits.dtype == torch.bfloat16 and bool(torch.isfinite(logits).all())
    assert lm.info()["dtype"] == "bfloat16"
