"""Loading causal LMs and their tokenizers: by alias, local folder, GGUF file or hub id.

Safetensors only (a GGUF file is converted once into a cached safetensors folder:
:mod:`gmts_core.model.gguf`), ``trust_remote_code`` off unless asked, device and dtype
``auto``, a pad token guaranteed. Works with any ``AutoModelForCausalLM`` architecture whose
LM-head path :func:`gmts_core.model.logit_head.check_head_path` verifies at load time (others
are refused by name).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from gmts_core.errors import InvalidInputError, ModelLoadError, ModelNotFoundError
from gmts_core.model.gguf import Progress, converted_folder, find_gguf
from gmts_core.model.logit_head import check_head_path

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class LoadedModel:
    """A model, its tokenizer and where they came from."""

    name: str  # what the caller asked for (alias, folder or hub id)
    source: str  # the folder or hub id actually loaded
    model: PreTrainedModel
    tokenizer: Any  # a PreTrainedTokenizerBase
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # a trained policy's frozen reference (its starting weights), for the KL term of the
    # effective coefficient: a callable returning a context manager that yields the model
    reference: Callable[[], AbstractContextManager[Any]] | None = field(default=None, repr=False)
    reference_beta: float = 0.0  # the KL weight this policy trains with (a session's beta)

    @property
    def device(self) -> torch.device:
        """Where inputs go: the input embeddings' device (the first one under a device_map)."""
        return next(self.model.get_input_embeddings().parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "parameters": self.num_parameters,
            "vocab_size": self.vocab_size,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "architecture": type(self.model).__name__,
        }


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` picks CUDA when available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise InvalidInputError(
            f"unknown device {device!r}; e.g. auto, cpu, cuda, cuda:1"
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError(f"device {device!r} was asked for, but CUDA is not available")
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` is bfloat16 on a GPU that supports it, else float32; bf16/fp16/fp32 are aliases."""
    dtype = _DTYPE_ALIASES.get(dtype, dtype)
    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise InvalidInputError(
            f"unknown dtype {dtype!r}; valid: auto, {', '.join(_DTYPES)}"
        ) from None


def resolve_local_model(name: str, allowed_roots: list[Path]) -> Path | None:
    """The model folder (or GGUF file) ``name`` names inside one of ``allowed_roots``, or None.

    Relative names are taken inside each root; absolute names must lie inside a root. The real
    path (symlinks resolved) must stay inside the root, so ``..`` and symlinks cannot escape.
    """
    candidate = Path(name)
    for root in allowed_roots:
        real_root = root.resolve()
        path = candidate if candidate.is_absolute() else real_root / candidate
        real = path.resolve()
        if real != real_root and real_root not in real.parents:
            continue
        if (real / "config.json").is_file() or _holds_gguf(real):
            return real
    return None


def _holds_gguf(path: Path) -> bool:
    """A GGUF file, or a folder holding GGUF files (several: loading it says which to give)."""
    try:
        return find_gguf(path) is not None
    except ModelLoadError:
        return True


def is_hub_id(name: str) -> bool:
    """A plausible hub id: ``org/name`` of safe characters, no path tricks."""
    parts = name.split("/")
    safe = all(
        p and p not in (".", "..") and all(c.isalnum() or c in "-_." for c in p) for p in parts
    )
    return safe and len(parts) in (1, 2) and not name.startswith(".")


def load_model(
    source: str | Path,
    name: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    trust_remote_code: bool = False,
    device_map: str | None = None,
    progress: Progress | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer from a local folder, a GGUF file (or a folder holding
    one; converted once, then read from the cache) or a hub id (safetensors only).
    ``progress`` receives a line per stage of a GGUF conversion."""
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    name = name or str(source)
    gguf_file = find_gguf(source)
    if gguf_file is not None:
        source = converted_folder(gguf_file, progress)
    local = Path(source).is_dir()
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code, "local_files_only": local}
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source), **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            str(source), dtype=torch_dtype, use_safetensors=True, device_map=device_map, **kwargs
        )
    except OSError as exc:
        if not local and "not a local folder and is not a valid model identifier" in str(exc):
            raise ModelNotFoundError(f"model {source!s} not found") from exc
        raise ModelLoadError(f"could not load model {source!s}: {exc}") from exc
    except (ValueError, RuntimeError, KeyError, SafetensorError) as exc:  # corrupt weights too
        raise ModelLoadError(f"could not load model {source!s}: {exc}") from exc
    if device_map is None:
        torch.nn.Module.to(model, dev)
    model.eval()
    model.requires_grad_(False)  # the base model is never trained in place
    ensure_pad_token(tokenizer)
    with one_thread():  # an 8-token probe: more threads only wait on each other
        check_head_path(model)  # refuses architectures whose logits this tool would get wrong
    logger.info("loaded %s (%s) on %s", name, type(model).__name__, dev)
    return LoadedModel(name, str(source), model, tokenizer)


_THREADS_LOCK = threading.Lock()


@contextmanager
def one_thread() -> Iterator[None]:
    """Run tiny torch work (the load-time probe) in one intra-op thread, then restore the
    count. With two threads on a busy 2-core machine the probe of a 30-layer model took 5-28 s
    (each small matrix product waits for a thread the kernel has not scheduled), in one 1-2 s.
    One change at a time (the lock), so concurrent loads restore the count they found."""
    with _THREADS_LOCK:
        threads = torch.get_num_threads()
        if threads > 1:
            torch.set_num_threads(1)
        try:
            yield
        finally:
            if threads > 1:
                torch.set_num_threads(threads)


def ensure_pad_token(tokenizer: Any) -> None:
    """Give the tokenizer a pad token (its EOS) if it has none, as generation needs one."""
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError("tokenizer has neither a pad nor an EOS token")
        tokenizer.pad_token = tokenizer.eos_token


class ModelCache:
    """A small LRU cache of loaded models; each source loads once, under a lock."""

    def __init__(self, max_models: int = 2) -> None:
        self.max_models = max_models
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def get(self, name: str, source: str | Path, **load_kwargs: Any) -> LoadedModel:
        key = f"{name}\0{source}"
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            load_lock = self._loading.setdefault(key, threading.Lock())
        with load_lock:
            with self._lock:
                if key in self._models:
                    return self._models[key]
            loaded = load_model(source, name=name, **load_kwargs)
            with self._lock:
                self._models[key] = loaded
                while len(self._models) > self.max_models:
                    evicted, _ = self._models.popitem(last=False)
                    logger.info("evicted model %s from cache", evicted.split("\0")[0])
            return loaded

    def peek(self, name: str, source: str | Path) -> LoadedModel | None:
        """The model if it is loaded already; never loads."""
        with self._lock:
            return self._models.get(f"{name}\0{source}")

    def loaded_names(self) -> list[str]:
        with self._lock:
            return [k.split("\0")[0] for k in self._models]
