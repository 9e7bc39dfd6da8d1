"""Which models the server may load, and the cache of loaded ones.

A model name resolves, in order, to: a registered alias (the built-in ``tiny-arith``, the
packaged models that are installed, e.g. ``smollm2-135m``, and ``GMTS_MODEL_ALIASES``), a
folder inside one of the allowed roots (``GMTS_MODEL_ROOTS``; no ``..``, no percent-encoding,
no backslashes, no symlink leading out of the root), or, only when ``GMTS_ALLOW_HUB_MODELS=1``,
a Hugging Face hub id. Anything else is a ModelNotFoundError listing the available names (a
packaged model that is not installed: with the command that installs it). Weights load as
safetensors only (a GGUF file is converted once to a cached safetensors folder), once per
model, under a lock.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from safetensors import SafetensorError, safe_open

from app.core.config import Settings
from app.services.catalog import BUILTIN_ALIASES as BUILTIN_ALIASES
from gmts_core.demo import DEMO_ALIAS, DEMO_MODEL_DIR
from gmts_core.errors import ModelLoadError, ModelNotFoundError
from gmts_core.model.gguf import Progress, converted_path, find_gguf
from gmts_core.model.loading import (
    LoadedModel,
    ModelCache,
    is_hub_id,
    load_model,
    resolve_local_model,
)
from gmts_core.model.packaged import PACKAGED_MODELS, PackagedModel

logger = logging.getLogger(__name__)

MAX_NAME_CHARS = 256
_FORBIDDEN_CHARS = ("%", "\\", "\x00", "\n", "\r", "~")


@dataclass(frozen=True)
class ModelRef:
    """A resolved model name: its canonical name, what to load, and how it was found."""

    name: str
    source: str  # a local folder (absolute) or a hub id
    kind: str  # "alias" | "folder" | "hub"

    @property
    def is_local(self) -> bool:
        return self.kind != "hub"


def _is_model_folder(path: Path) -> bool:
    """A model folder (``config.json``), a GGUF file or a folder holding one GGUF file."""
    if (path / "config.json").is_file():
        return True
    try:
        return find_gguf(path) is not None
    except ModelLoadError:  # several GGUF files: loading it says which
        return True


def _unsafe_name(name: str) -> str | None:
    """Why ``name`` can never be a model name, or None if it may be one."""
    if not name or len(name) > MAX_NAME_CHARS:
        return f"model names have 1 to {MAX_NAME_CHARS} characters"
    if any(c in name for c in _FORBIDDEN_CHARS):
        return "model names may not contain '%', '\\', '~' or control characters"
    if ".." in PurePosixPath(name).parts:
        return "model names may not contain '..'"
    return None


class ModelRegistry:
    """Resolves model names safely and loads them through a small LRU cache."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.aliases: dict[str, Path] = {DEMO_ALIAS: DEMO_MODEL_DIR}
        # packaged models: installed ones are aliases, the others are listed with their install
        self.packaged: dict[str, PackagedModel] = dict(PACKAGED_MODELS)
        self.not_installed: dict[str, PackagedModel] = {}
        for alias, packaged in self.packaged.items():
            path = packaged.path()
            if path is None:
                self.not_installed[alias] = packaged
            else:
                self.aliases[alias] = path
        self.aliases.update({k: Path(v).expanduser() for k, v in settings.model_aliases.items()})
        for alias in settings.model_aliases:
            self.not_installed.pop(alias, None)
        self.roots = [Path(r).expanduser() for r in settings.model_roots]
        self.cache = ModelCache(settings.max_loaded_models)
        self._tokenizers: dict[str, Any] = {}  # tokenizers loaded without their model
        self._tokenizers_lock = threading.Lock()

    # --- resolution (cheap, no loading) ---

    def resolve(self, name: str | None, any_source: bool = False) -> ModelRef:
        """The model ``name`` (or the default model) names; raises ModelNotFoundError.
        ``any_source`` (the CLI, on the user's own machine): also any local model folder by its
        path, and any hub id."""
        name = self.settings.default_model if name is None else name
        if name in self.aliases:
            return ModelRef(name, str(self.aliases[name]), "alias")
        if name in self.not_installed:
            missing = self.not_installed[name]
            raise ModelNotFoundError(
                f"model {name!r} is not installed; install it with `{missing.install_command}`"
            )
        if any_source:
            if _is_model_folder(Path(name)):
                return ModelRef(name, str(Path(name).resolve()), "folder")
            if is_hub_id(name):
                return ModelRef(name, name, "hub")
        reason = _unsafe_name(name)
        if reason is None:
            folder = resolve_local_model(name, self.roots) if self.roots else None
            if folder is not None:
                return ModelRef(self._folder_name(folder), str(folder), "folder")
            if self.settings.allow_hub_models and is_hub_id(name) and not name.startswith("/"):
                return ModelRef(name, name, "hub")
        raise ModelNotFoundError(self._not_found_message(name, reason))

    def _folder_name(self, folder: Path) -> str:
        """A folder's canonical name: its path relative to the first root that holds it."""
        for root in self.roots:
            real_root = root.resolve()
            if folder == real_root or real_root in folder.parents:
                rel = folder.relative_to(real_root).as_posix()
                return rel if rel != "." else folder.name
        return folder.name

    def _not_found_message(self, name: str, reason: str | None) -> str:
        shown = name if len(name) <= 80 else name[:77] + "..."
        why = f" ({reason})" if reason else ""
        hub = (
            " Hub ids are disabled (GMTS_ALLOW_HUB_MODELS=0)."
            if not self.settings.allow_hub_models
            else ""
        )
        return f"unknown model {shown!r}{why}; available: {', '.join(self.available_names())}.{hub}"

    def available_names(self) -> list[str]:
        """Aliases and the model folders directly inside the allowed roots."""
        return list(self.aliases) + [n for n, _ in self._root_folders() if n not in self.aliases]

    def chat_template_default(self, name: str) -> bool:
        """Whether prompts to ``name`` are wrapped in its chat template unless a request says
        otherwise: on for the packaged instruct models, off for every other model."""
        packaged = self.packaged.get(name)
        return (
            packaged is not None
            and packaged.chat_template
            and name not in self.settings.model_aliases
        )

    def _root_folders(self) -> list[tuple[str, Path]]:
        found: list[tuple[str, Path]] = []
        for root in self.roots:
            if not root.is_dir():
                continue
            for child in sorted(root.iterdir()):
                real = resolve_local_model(child.name, [root])
                if real is not None:
                    found.append((self._folder_name(real), real))
        return found

    # --- loading ---

    def ensure_available(self, ref: ModelRef) -> None:
        """Raise ModelNotFoundError if a local model's folder is missing (e.g. untrained demo)."""
        if ref.is_local and not _is_model_folder(Path(ref.source)):
            hint = " (train it with `gmts train-demo`)" if ref.name == DEMO_ALIAS else ""
            raise ModelNotFoundError(
                f"model {ref.name!r} is registered but its folder has no config.json{hint}"
            )

    def get(self, name: str | None = None) -> LoadedModel:
        """The loaded model (loading it on first use; blocking: call it off the event loop)."""
        ref = self.resolve(name)
        return self.load(ref)

    def load(
        self, ref: ModelRef, device: str | None = None, progress: Progress | None = None
    ) -> LoadedModel:
        """Load (or reuse) ``ref`` on GMTS_DEVICE; a ModelLoadError names the model, not the
        server's path. Another ``device`` (``gmts analyze-run``'s ``--device``, or the device
        of one of its launched processes) loads a copy there, outside the cache: the cache
        holds each model once, on GMTS_DEVICE. ``progress`` hears a GGUF file's conversion."""
        self.ensure_available(ref)
        s = self.settings
        try:
            if device is not None and device != s.device:
                return load_model(
                    ref.source,
                    name=ref.name,
                    device=device,
                    dtype=s.dtype,
                    trust_remote_code=s.trust_remote_code,
                    progress=progress,
                )
            return self.cache.get(
                ref.name,
                ref.source,
                device=s.device,
                dtype=s.dtype,
                trust_remote_code=s.trust_remote_code,
                progress=progress,
            )
        except ModelLoadError as exc:
            if not ref.is_local:
                raise
            message = str(exc).replace(str(Path(ref.source).resolve()), ref.name)
            raise ModelLoadError(message.replace(ref.source, ref.name)) from exc

    def tokenizer(self, name: str | None = None) -> Any:
        """The tokenizer of ``name`` without its weights where it can (a local model folder:
        a view of a dump's logged numbers turns token ids into text, no forward pass); the
        loaded model's when it is loaded; else the model is loaded (a GGUF file, a hub id)."""
        ref = self.resolve(name)
        if (loaded := self.loaded_model(ref)) is not None:
            return loaded.tokenizer
        with self._tokenizers_lock:
            if ref.source in self._tokenizers:
                return self._tokenizers[ref.source]
        self.ensure_available(ref)
        folder = Path(ref.source)
        if not (ref.is_local and (folder / "config.json").is_file()):
            return self.load(ref).tokenizer
        from transformers import AutoTokenizer  # the heavy import, only where it is needed

        try:
            found = AutoTokenizer.from_pretrained(
                str(folder),
                local_files_only=True,
                trust_remote_code=self.settings.trust_remote_code,
            )
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"could not load the tokenizer of model {ref.name!r}") from exc
        with self._tokenizers_lock:
            self._tokenizers[ref.source] = found
        return found

    def is_loaded(self, ref: ModelRef) -> bool:
        return self.cache.peek(ref.name, ref.source) is not None

    def loaded_model(self, ref: ModelRef) -> LoadedModel | None:
        """The model if it is loaded already, without loading it."""
        return self.cache.peek(ref.name, ref.source)

    # --- listing ---

    def list_models(self) -> list[dict[str, Any]]:
        """One entry per known model: alias, source, loaded, parameters, vocab size, ..."""
        refs = [ModelRef(n, str(p), "alias") for n, p in self.aliases.items()]
        # after the demo model: the packaged models that are not installed (source: none)
        refs[1:1] = [ModelRef(n, "", "alias") for n in self.not_installed]
        refs += [ModelRef(n, str(p), "folder") for n, p in self._root_folders()]
        seen: set[str] = set()
        out = []
        for ref in refs:
            if ref.name in seen:
                continue
            seen.add(ref.name)
            out.append(self.describe(ref))
        return out

    def describe(self, ref: ModelRef) -> dict[str, Any]:
        lm = self.loaded_model(ref)
        entry: dict[str, Any] = {
            "alias": ref.name,
            # a local model shows its folder's name only: server paths stay on the server
            "source": Path(ref.source).name if ref.is_local else ref.source,
            **({"source": self.not_installed[ref.name].distribution} if not ref.source else {}),
            "kind": ref.kind,
            "default": ref.name == self.settings.default_model,
            "loaded": lm is not None,
            "available": not ref.is_local
            or (bool(ref.source) and _is_model_folder(Path(ref.source))),
            "chat_template": self.chat_template_default(ref.name),
            "install": (
                self.not_installed[ref.name].install_command
                if ref.name in self.not_installed
                else None
            ),
        }
        if lm is not None:
            info = lm.info()
            entry.update({k: info[k] for k in ("parameters", "vocab_size", "device", "dtype")})
            entry["architecture"] = info["architecture"]
        elif ref.is_local and ref.source:
            entry.update(describe_folder(_described_folder(Path(ref.source))))
        else:
            entry.update(_EMPTY_INFO)
        return entry


_EMPTY_INFO: dict[str, Any] = {
    "parameters": None,
    "vocab_size": None,
    "device": None,
    "dtype": None,
    "architecture": None,
}


def _described_folder(source: Path) -> Path:
    """The folder whose files describe ``source``: a GGUF file's conversion (absent until its
    first load: then nothing is known yet), else the folder itself."""
    try:
        gguf_file = find_gguf(source)
    except ModelLoadError:
        return source
    return converted_path(gguf_file) if gguf_file is not None else source


def describe_folder(folder: Path) -> dict[str, Any]:
    """Size facts of an unloaded model from its config and safetensors headers (no weights)."""
    info = dict(_EMPTY_INFO)
    try:
        config = json.loads((folder / "config.json").read_text())
        info["vocab_size"] = config.get("vocab_size")
        info["architecture"] = (config.get("architectures") or [None])[0]
        info["dtype"] = config.get("dtype") or config.get("torch_dtype")
        total = 0
        for shard in sorted(folder.glob("*.safetensors")):
            with safe_open(str(shard), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    n = 1
                    for dim in f.get_slice(key).get_shape():
                        n *= dim
                    total += n
        info["parameters"] = total or None
    except (OSError, ValueError, SafetensorError) as exc:
        logger.debug("cannot describe %s: %s", folder, exc)
    return info
