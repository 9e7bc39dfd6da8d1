"""Compiling ``kernels.c``, caching the library, and checking a cached library before it loads.

One build is a :class:`Target`: the compiler, its flags and the file it writes,
``kernels-<key>.so`` in :func:`cache_dir`, where the key hashes the source's SHA-256, the flags,
the compiler (path and ``--version``), the machine and the CPU's flags. Beside it
``kernels-<key>.json`` records the SHA-256 of the library as written, with the source's hash,
the flags and the compiler.

A cached library is loaded only when :func:`verify` finds nothing wrong: the cache folder, the
library and its record are owned by the current user and writable by no one else (no group or
world write bit; neither file a symbolic link), the record names this key, and the library's
SHA-256 equals the recorded one. A library that fails is refused (the log says why, once) and
built again; an unsafe folder is not written to at all (:class:`UnsafeCache`: the callers use
PyTorch's ops). The trust boundary is the current user: whoever can write as that user can
change both files.

The flags keep IEEE float semantics, so a given binary gives the same bits as the same C run
one operation at a time: no ``-ffast-math``, and ``-ffp-contract=off``, so that no ``a * b + c``
is fused into one FMA instruction. Under ``-march=native`` the compiler fuses them where the CPU
has FMA and not where it has none, a last-bit difference between machines that could reorder
tied scores. (The loops marked ``omp simd reduction`` still sum in as many lanes as the CPU's
vectors hold, so a sum's last bits can differ between CPUs of different vector widths.)
``-fno-trapping-math`` says no code reads the floating-point exception flags or traps on them,
which none does; it lets the compiler turn the branches of the float32 exponential into selects,
so its loops are vectorized (the statistics' sums 3.4x faster, the MLP's gate 4.5x, one thread).
Each exponential keeps its bits, but the statistics' sums (``omp simd reduction`` loops the
compiler had kept scalar) now add in vector lanes: their last bits differ from a build without
the flag (relative 1e-15 at most on 16 rows of 3000 logits) and between CPUs of vector widths
that differ.
The matrix product ``gmts_linear_rows`` uses FMA instructions explicitly and declines on a CPU
without them (:mod:`gmts_core.native`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gmts_core.trusted_cache import (  # the cache rule shared with the GGUF conversions
    UnsafeCache,  # noqa: F401 (raised through make_private_folder; callers catch it from here)
    make_private_folder,
    owned_and_private,
    sha256_file,
    user_cache_dir,
)

logger = logging.getLogger("gmts_core.native")

SOURCE = Path(__file__).with_name("kernels.c")
# -fno-fast-math before -ffp-contract=off: with clang the former resets the contraction mode
FLAGS = (
    "-O3",
    "-march=native",
    "-fno-fast-math",
    "-ffp-contract=off",
    "-fno-trapping-math",
    "-fopenmp-simd",
    "-fno-math-errno",
    "-shared",
    "-fPIC",
)
# tried first: full-width vectors where the CPU has AVX-512 (the compiler's default is 256 bits,
# 1.7x slower on the statistics' sums); a compiler that does not know the flag builds without
WIDE = ("-mprefer-vector-width=512",)
# the decoding step's attention and the categorical draw split their rows over torch's threads
# (OpenMP; the process's one OpenMP runtime is torch's libgomp, loaded first): a compiler
# without OpenMP builds them serial
THREADS = ("-fopenmp",)
VARIANTS = ((*FLAGS, *WIDE, *THREADS), (*FLAGS, *THREADS), (*FLAGS, *WIDE), FLAGS)
"""The flag sets tried in turn: the first the compiler accepts is built and cached."""
COMPILE_TIMEOUT_S = 120

_WARNED: set[str] = set()


class CompileError(RuntimeError):
    """The compiler failed (or is missing)."""


def cache_dir() -> Path:
    """Where the compiled library is kept (``$GMTS_NATIVE_CACHE``, else
    ``$XDG_CACHE_HOME/gmts-explorer/native``, else ``~/.cache/gmts-explorer/native``)."""
    return user_cache_dir("GMTS_NATIVE_CACHE", "native")


def compiler() -> str | None:
    """The C compiler's path: ``$CC``, else ``cc``, else ``gcc``; None without one."""
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


@dataclass(frozen=True)
class Target:
    """One build of the kernels: this compiler with these flags, written to ``path``."""

    compiler: str
    version: str
    flags: tuple[str, ...]
    source_sha256: str
    path: Path

    @property
    def record(self) -> Path:
        """The JSON record beside the library: its SHA-256, the source's, the flags."""
        return self.path.with_suffix(".json")

    def command(self, out: Path) -> list[str]:
        """The compile command writing the library to ``out``."""
        return [self.compiler, *self.flags, "-o", str(out), str(SOURCE), "-lm"]


def target(compiler_path: str, flags: tuple[str, ...]) -> Target:
    """The build of the current source with ``compiler_path`` and ``flags`` (nothing compiled)."""
    version = subprocess.run(
        [compiler_path, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    source = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    parts = [source, " ".join(flags), compiler_path, version, platform.machine(), _cpu_flags()]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    return Target(compiler_path, version, flags, source, cache_dir() / f"kernels-{key}.so")


def verify(build: Target) -> str | None:
    """Why the cached library of ``build`` must not be loaded, or None when it may be: owner and
    permissions of the folder, the library and its record, and the library's SHA-256 against
    the recorded one."""
    for path, what, folder in (
        (build.path.parent, "cache folder", True),
        (build.path, "library", False),
        (build.record, "library's record", False),
    ):
        try:
            reason = owned_and_private(path, what, folder)
        except FileNotFoundError:
            return f"the {what} {path} is missing"
        if reason is not None:
            return reason
    try:
        recorded = json.loads(build.record.read_text())
    except (OSError, ValueError) as exc:
        return f"the record {build.record} is unreadable: {exc}"
    if (
        not isinstance(recorded, dict)
        or recorded.get("library") != build.path.name
        or recorded.get("source_sha256") != build.source_sha256
    ):
        return f"the record {build.record} is not this library's"
    if recorded.get("sha256") != sha256_file(build.path):
        return f"the library {build.path} does not match its recorded SHA-256"
    return None


def warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning("%s", message)


def _compile(cmd: list[str]) -> None:
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise CompileError(done.stderr.strip()[-400:] or f"{cmd[0]} failed")


def build_with(build: Target, force: bool = False) -> Path:
    """The library of ``build``: the cached one if :func:`verify` passes it (and not
    ``force``), else compiled now, recorded and cached. Raises :class:`UnsafeCache` or
    :class:`CompileError`."""
    make_private_folder(build.path.parent)
    if not force and (build.path.exists() or build.record.exists()):
        reason = verify(build)
        if reason is None:
            return build.path
        warn_once(f"native kernels: refused the cached library, building it again: {reason}")
    with tempfile.TemporaryDirectory(dir=build.path.parent) as tmp:
        built = Path(tmp) / build.path.name
        _compile(build.command(built))
        built.chmod(0o755)  # whatever the umask: writable by this user alone
        record = {
            "library": build.path.name,
            "sha256": sha256_file(built),
            "source_sha256": build.source_sha256,
            "flags": list(build.flags),
            "compiler": build.compiler,
            "compiler_version": build.version.splitlines()[0] if build.version else "",
            "machine": platform.machine(),
        }
        written = Path(tmp) / build.record.name
        written.write_text(json.dumps(record, indent=1) + "\n")
        written.chmod(0o644)
        # atomic each; a concurrent build writes an equal library (or, between the two renames,
        # a reader refuses the pair and builds it again)
        os.replace(built, build.path)
        os.replace(written, build.record)
    return build.path


def ensure_built(compiler_path: str, force: bool = False) -> Target:
    """The build that is cached (checked) or compiled now: the first of :data:`VARIANTS` (wide
    vectors and OpenMP first) whose flags the compiler accepts."""
    for flags in VARIANTS[:-1]:
        try:
            build = target(compiler_path, flags)
            build_with(build, force)
            return build
        except CompileError:
            continue
    plain = target(compiler_path, VARIANTS[-1])
    build_with(plain, force)
    return plain


@dataclass(frozen=True)
class Status:
    """What :func:`status` finds, without compiling: ``state`` is ``ready`` (a cached library
    that passes :func:`verify`), ``not built``, ``refused`` (``reason`` says why) or
    ``no compiler``."""

    state: str
    cache_dir: Path
    compiler: str | None
    flags: tuple[str, ...]
    library: Path | None = None
    sha256: str | None = None
    reason: str | None = None


def status() -> Status:
    """Whether a compiled library for this source, compiler and CPU is cached and valid."""
    cc = compiler()
    if cc is None:
        return Status("no compiler", cache_dir(), None, FLAGS, reason="no C compiler ($CC or cc)")
    folder = cache_dir()
    if folder.exists() and (reason := owned_and_private(folder, "cache folder", True)):
        return Status("refused", folder, cc, VARIANTS[0], reason=reason)
    refused: tuple[Target, str] | None = None
    for flags in VARIANTS:
        build = target(cc, flags)
        if not (build.path.exists() or build.record.exists()):
            continue
        reason = verify(build)
        if reason is None:
            digest = json.loads(build.record.read_text())["sha256"]
            return Status("ready", cache_dir(), cc, flags, build.path, digest)
        refused = refused or (build, reason)
    if refused is not None:
        build, reason = refused
        return Status("refused", cache_dir(), cc, build.flags, build.path, reason=reason)
    return Status("not built", cache_dir(), cc, VARIANTS[0])
