"""The library's C kernels for the front ends: `gmts native build` / `info`, and the server's
startup (the kernels built, or the cached build checked, and loaded before the first request).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from gmts_core import native
from gmts_core.native import build as native_build

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NativeInfo:
    """Where the kernels stand: ``state`` is ``ready``, ``not built``, ``refused`` or
    ``no compiler``; ``enabled`` is False under ``GMTS_NATIVE=0``."""

    state: str
    enabled: bool
    cache_dir: Path
    compiler: str | None
    flags: tuple[str, ...]
    library: Path | None
    sha256: str | None
    reason: str | None

    def lines(self) -> list[str]:
        """The status as ``name: value`` lines, for a terminal."""
        rows = [
            ("state", self.state + ("" if self.reason is None else f" ({self.reason})")),
            ("enabled", "yes" if self.enabled else "no (GMTS_NATIVE=0: PyTorch's ops are used)"),
            ("library", str(self.library) if self.library else "-"),
            ("sha256", self.sha256 or "-"),
            ("compiler", self.compiler or "-"),
            ("flags", " ".join(self.flags)),
            ("cache", f"{self.cache_dir} (GMTS_NATIVE_CACHE)"),
        ]
        return [f"{name}: {value}" for name, value in rows]


def native_info() -> NativeInfo:
    """Whether a compiled, valid kernel library is cached for this source, compiler and CPU
    (nothing is compiled)."""
    found = native_build.status()
    return NativeInfo(
        found.state,
        native.enabled(),
        found.cache_dir,
        found.compiler,
        found.flags,
        found.library,
        found.sha256,
        found.reason,
    )


def build_native(force: bool = False) -> NativeInfo:
    """Compile the kernels now (a valid cached library is kept unless ``force``) and check the
    result. Raises RuntimeError when there is no compiler, the cache folder is unsafe or the
    compiler fails."""
    cc = native.compiler()
    if cc is None:
        raise RuntimeError("no C compiler found ($CC or cc): the library uses PyTorch's ops")
    native_build.ensure_built(cc, force=force)
    return native_info()


def prepare_native() -> bool:
    """At the server's startup, before any request: build (or check the cached build of) and
    load the kernels, so no request compiles. True when they are loaded; False when off or
    unavailable (the library logged why; PyTorch's ops are used)."""
    loaded = native.library() is not None
    logger.info("native CPU kernels %s", "loaded" if loaded else "not in use: PyTorch's ops")
    return loaded
