"""GGUF files (llama.cpp's format, Ollama's blobs) as a model source: checked, converted once,
cached as a safetensors folder.

transformers reads GGUF itself (with the ``gguf`` package): it de-quantizes every tensor to
float and converts the tokenizer, about half a minute to two for a 135 M-parameter model. So a
GGUF file is converted once, into ``<cache>/<stem>-<key>/`` (:func:`cache_dir`), a plain
safetensors folder in float32 with its tokenizer and chat template, and every later load reads
that folder (seconds). ``key`` hashes the GGUF file's SHA-256, the transformers version that
converted it and :data:`CONVERTER_VERSION`.

A converted folder is loaded only when :func:`verify` finds nothing wrong, by the rule of the
native kernels' cache (:mod:`gmts_core.trusted_cache`): the cache folder, the converted folder
and each of its files are the current user's and writable by no one else, the folder holds
exactly the files its record ``gmts-gguf.json`` lists, and each file's SHA-256 equals the
recorded one. The SHA-256s are computed when the folder is written, with each file's stamp
(inode, size, mtime, ctime: :func:`gmts_core.trusted_cache.file_stamp`); a later check hashes
only a file whose stamp differs from the recorded one, and records its new stamp when its
SHA-256 still matches. So a second load reads no weights twice (0.4 s of hashing saved, and on
a busy machine far more: the weights are not read from disk once to hash and once to load).
Anything else is converted again (the log says why).

Before converting, :func:`refusal` reads the file's header and refuses, with the reason, what
transformers cannot read: a file that is not GGUF, an architecture transformers does not map
from GGUF, one that is not a causal LM, or a tensor type ``gguf`` cannot de-quantize.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from gmts_core.errors import ModelLoadError
from gmts_core.trusted_cache import (
    UnsafeCache,
    exclusive,
    file_stamp,
    make_private_folder,
    owned_and_private,
    private_reason,
    sha256_file,
    user_cache_dir,
)

logger = logging.getLogger(__name__)

CONVERTER_VERSION = 1
"""Raised when the converted folder's layout changes: older conversions are then redone."""
RECORD = "gmts-gguf.json"
_FLOAT_TYPES = ("F32", "F16", "BF16")

Progress = Callable[[str], None]


def cache_dir() -> Path:
    """Where converted folders are kept (``$GMTS_GGUF_CACHE``, else
    ``$XDG_CACHE_HOME/gmts-explorer/gguf``, else ``~/.cache/gmts-explorer/gguf``)."""
    return user_cache_dir("GMTS_GGUF_CACHE", "gguf")


def find_gguf(source: str | Path) -> Path | None:
    """The GGUF file ``source`` names: the file itself (``*.gguf``), or the one ``*.gguf`` in a
    folder without a ``config.json``; None when ``source`` is neither. A folder with several
    GGUF files is an error naming them (which one is meant cannot be guessed)."""
    path = Path(source)
    if path.suffix.lower() == ".gguf" and path.is_file():
        return path.resolve()
    if not path.is_dir() or (path / "config.json").is_file():
        return None
    found = sorted(p for p in path.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise ModelLoadError(f"{path.name} holds several GGUF files ({names}); give one by path")
    return found[0].resolve() if found else None


# --- the header: what the file is, and whether transformers can read it ---


@dataclass(frozen=True)
class GGUFSummary:
    """What a GGUF file's header says (no tensor data read)."""

    architecture: str
    tensor_types: tuple[str, ...]  # distinct GGML types of its tensors, e.g. ("F32", "Q4_1")
    parameters: int
    vocab_size: int | None


def read_summary(path: Path) -> GGUFSummary:
    """The header of ``path``; a ModelLoadError when it is not a readable GGUF file."""
    from gguf import GGUFReader  # gguf: imported only when a GGUF file is given (0.3 s)

    try:
        reader = GGUFReader(path)
        field = reader.fields["general.architecture"]
        arch = bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    except (ValueError, KeyError, OSError, IndexError) as exc:
        raise ModelLoadError(f"{path.name} is not a readable GGUF file: {exc}") from exc
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    return GGUFSummary(
        architecture=str(arch),
        tensor_types=tuple(sorted({t.tensor_type.name for t in reader.tensors})),
        parameters=sum(int(t.n_elements) for t in reader.tensors),
        vocab_size=len(tokens.data) if tokens is not None else None,
    )


def _dequantizable(type_name: str) -> bool:
    """Whether ``gguf`` de-quantizes tensors of this GGML type (tried on one zero block)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # gguf: as in read_summary
    from gguf.quants import dequantize

    if type_name in _FLOAT_TYPES:
        return True
    qtype = GGMLQuantizationType[type_name]
    _, type_size = GGML_QUANT_SIZES[qtype]
    try:
        dequantize(np.zeros((1, type_size), dtype=np.uint8), qtype)
    except NotImplementedError:
        return False
    return True


def refusal(path: Path, summary: GGUFSummary) -> str | None:
    """Why transformers cannot turn ``path`` into a causal LM, or None when it can: its
    architecture must be one transformers maps from GGUF (its own table) to a causal-LM model
    type, and every tensor type one that ``gguf`` de-quantizes."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint  # imports gguf
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    unreadable = [t for t in summary.tensor_types if not _dequantizable(t)]
    if unreadable:
        return (
            f"its tensors of type {', '.join(unreadable)} cannot be de-quantized by the gguf "
            f"package (readable: F32, F16, BF16 and the Q*/IQ* block types gguf implements)"
        )
    try:  # transformers' own architecture check and mapping (metadata only)
        parsed = load_gguf_checkpoint(str(path), return_tensors=False)
    except (ValueError, KeyError, NotImplementedError) as exc:
        return f"transformers cannot read its architecture {summary.architecture!r}: {exc}"
    model_type = parsed.get("config", {}).get("model_type")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return f"its architecture {summary.architecture!r} ({model_type}) is not a causal LM"
    return None


# --- the cache: key, verification, conversion ---

_HASHES: dict[tuple[str, int, int, int], str] = {}
_HASHES_LOCK = threading.Lock()


def source_sha256(path: Path) -> str:
    """The file's SHA-256, remembered in this process while its size, mtime and inode stay."""
    info = path.stat()
    stamp = (str(path), info.st_size, info.st_mtime_ns, info.st_ino)
    with _HASHES_LOCK:
        if stamp in _HASHES:
            return _HASHES[stamp]
    digest = sha256_file(path)
    with _HASHES_LOCK:
        _HASHES[stamp] = digest
    return digest


def converted_path(path: Path) -> Path:
    """Where the conversion of ``path`` is (or will be) kept; nothing is read but the file."""
    parts = [source_sha256(path), transformers.__version__, str(CONVERTER_VERSION)]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in path.stem)[:80]
    return cache_dir() / f"{stem}-{key}"


def verify(folder: Path, source_digest: str) -> str | None:
    """Why the converted ``folder`` must not be loaded, or None when it may be (module doc)."""
    for target, what, is_folder in (
        (folder.parent, "cache folder", True),
        (folder, "converted folder", True),
        (folder / RECORD, "conversion record", False),
    ):
        try:
            reason = owned_and_private(target, what, is_folder)
        except FileNotFoundError:
            return f"the {what} {target} is missing"
        if reason is not None:
            return reason
    try:
        record = json.loads((folder / RECORD).read_text())
        files: dict[str, str] = dict(record["files"])
        stamps: dict[str, list[int]] = dict(record.get("stamps") or {})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"the record in {folder} is unreadable: {exc}"
    if record.get("source_sha256") != source_digest:
        return f"the record in {folder} is not this GGUF file's"
    present = {p.name for p in folder.iterdir()} - {RECORD}
    if present != set(files):
        return f"{folder} holds other files than its record lists"
    fresh = {}
    for name, digest in files.items():
        info = (folder / name).lstat()
        reason = private_reason(info, folder / name, "converted file")
        if reason is not None:
            return reason
        fresh[name] = file_stamp(info)
        if stamps.get(name) == fresh[name]:
            continue  # unchanged since it was hashed
        if sha256_file(folder / name) != digest:
            return f"the file {folder / name} does not match its recorded SHA-256"
    if fresh != stamps:
        _write_record(folder, {**record, "stamps": fresh})
    return None


def _write_record(folder: Path, record: dict[str, Any]) -> None:
    """Write ``record`` as the folder's record, atomically (through the private cache folder,
    so the converted folder never holds a file its record does not list)."""
    with tempfile.NamedTemporaryFile("w", dir=folder.parent, prefix=".record-", delete=False) as fh:
        fh.write(json.dumps(record, indent=1) + "\n")
    Path(fh.name).chmod(0o644)
    os.replace(fh.name, folder / RECORD)


def _strip_quantizer(model: Any) -> None:
    """Mark a de-quantized GGUF model as the plain float model it is, so it saves normally."""
    model.hf_quantizer = None
    if hasattr(model, "is_quantized") and not isinstance(
        getattr(type(model), "is_quantized", None), property
    ):
        model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _write_conversion(path: Path, out: Path, source_digest: str) -> None:
    """De-quantize ``path`` with transformers and write it to ``out`` as safetensors, in float32
    (the de-quantized values exactly), with the tokenizer, chat template and record."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32
        )
    except (ValueError, KeyError, NotImplementedError, RuntimeError, OSError) as exc:
        raise ModelLoadError(f"transformers could not convert {path.name}: {exc}") from exc
    _strip_quantizer(model)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    files, stamps = {}, {}
    for written in sorted(out.iterdir()):
        written.chmod(0o644)  # whatever the umask: writable by this user alone
        files[written.name] = sha256_file(written)
        stamps[written.name] = file_stamp(written.lstat())
    record = {
        "source": path.name,
        "source_sha256": source_digest,
        "transformers": transformers.__version__,
        "converter": CONVERTER_VERSION,
        "files": files,
        "stamps": stamps,
    }
    (out / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    (out / RECORD).chmod(0o644)


_CONVERTING = threading.Lock()  # one conversion at a time in this process (each takes GBs)
# ... and one at a time across processes (trusted_cache.exclusive on this file of the cache):
# a second process waits for the first's conversion and then finds it, rather than converting
# it again and replacing the folder the first one is loading
LOCK_NAME = ".converting.lock"


def converted_folder(path: Path, progress: Progress | None = None) -> Path:
    """The verified safetensors folder converted from the GGUF file ``path``: the cached one,
    or converted now (refused with the reason where transformers cannot read the file).
    ``progress`` receives one line per stage (the conversion takes a minute or two)."""
    say = progress or (lambda message: None)
    dest = converted_path(path)
    digest = source_sha256(path)
    try:
        make_private_folder(dest.parent)
    except UnsafeCache as exc:
        raise ModelLoadError(f"cannot cache the conversion of {path.name}: {exc}") from exc
    with _CONVERTING, exclusive(dest.parent / LOCK_NAME):
        if dest.exists():
            reason = verify(dest, digest)
            if reason is None:
                return dest
            logger.warning("GGUF cache: converting %s again: %s", path.name, reason)
        say(f"reading the GGUF header of {path.name}")
        summary = read_summary(path)
        why = refusal(path, summary)
        if why is not None:
            raise ModelLoadError(f"cannot load {path.name}: {why}")
        say(
            f"converting {path.name} ({summary.architecture}, {summary.parameters:,} parameters, "
            f"{'/'.join(summary.tensor_types)}) to safetensors, once (every tensor is "
            "de-quantized: a minute or two for 135 M parameters)"
        )
        logger.info("converting %s into %s", path.name, dest)
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".converting-") as tmp:
            out = Path(tmp) / "folder"
            out.mkdir(mode=0o700)
            _write_conversion(path, out, digest)
            if dest.exists():  # refused above: replaced by the fresh conversion
                shutil.rmtree(dest)
            os.replace(out, dest)
        say(f"converted {path.name}; later loads read {dest.name}")
    return dest
