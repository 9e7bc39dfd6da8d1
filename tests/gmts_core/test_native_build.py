"""Building and caching the native kernels (gmts_core.native.build): compiled once with flags that
keep IEEE semantics (no FMA contraction), recorded with their SHA-256, and a cached library
loaded only when it, its record and its folder are the user's alone and its hash matches."""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
import torch

from gmts_core import native
from gmts_core.native import build
from gmts_core.stats import metrics

pytestmark = pytest.mark.skipif(
    native.compiler() is None, reason="no C compiler here: the native kernels are not built"
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[build.Target, list[list[str]]]:
    """One real build into a private folder, and the compile commands it ran."""
    folder = tmp_path_factory.mktemp("native-pristine")
    folder.chmod(0o700)
    commands: list[list[str]] = []
    real = build._compile

    def recording(cmd: list[str]) -> None:
        commands.append(cmd)
        real(cmd)

    cc = native.compiler()
    assert cc is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GMTS_NATIVE_CACHE", str(folder))
        mp.setattr(build, "_compile", recording)
        done = build.ensure_built(cc)
    return done, commands


class Cache:
    """A copy of the pristine cache in a fresh private folder (``GMTS_NATIVE_CACHE``), a fresh
    process's state, and a compiler that copies the pristine library (counted)."""

    def __init__(self, pristine: build.Target, folder: Path, mp: pytest.MonkeyPatch) -> None:
        folder.mkdir(mode=0o700)
        for path in (pristine.path, pristine.record):
            shutil.copy2(path, folder / path.name)
        self.folder, self.compiles = folder, 0
        self.loaded: list[str] = []  # the SHA-256 of each library given to dlopen
        self.flags = pristine.flags
        self.library = folder / pristine.path.name
        self.good_sha = build.sha256_file(pristine.path)
        mp.setenv("GMTS_NATIVE_CACHE", str(folder))
        mp.setenv("GMTS_NATIVE", "1")
        mp.setattr(native, "_STATE", {})
        mp.setattr(build, "_WARNED", set())

        def fake_compile(cmd: list[str]) -> None:
            self.compiles += 1
            shutil.copyfile(pristine.path, cmd[cmd.index("-o") + 1])

        real_cdll = native.ctypes.CDLL

        def recording_cdll(name: str, *args: Any, **kwargs: Any) -> Any:
            self.loaded.append(build.sha256_file(Path(name)))  # the bytes dlopen is given
            return real_cdll(name, *args, **kwargs)

        mp.setattr(build, "_compile", fake_compile)
        mp.setattr(native.ctypes, "CDLL", recording_cdll)

    def target(self) -> build.Target:
        cc = native.compiler()
        assert cc is not None
        return build.target(cc, self.flags)


@pytest.fixture
def cache(
    pristine: tuple[build.Target, list[list[str]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Cache:
    return Cache(pristine[0], tmp_path / "cache", monkeypatch)


def test_compile_command_keeps_ieee_semantics(
    pristine: tuple[build.Target, list[list[str]]],
) -> None:
    """-ffp-contract=off (after -fno-fast-math, which resets it under clang), and no flag that
    lets the compiler reassociate or assume finite values."""
    _, commands = pristine
    assert commands, "the pristine build compiled"
    for cmd in commands:
        assert "-ffp-contract=off" in cmd
        assert cmd.index("-ffp-contract=off") > cmd.index("-fno-fast-math")
        unsafe = {"-ffast-math", "-Ofast", "-funsafe-math-optimizations", "-ffinite-math-only",
                  "-fassociative-math", "-freciprocal-math", "-ffp-contract=fast"}  # fmt: skip
        assert not unsafe & set(cmd)
    assert "-ffp-contract=off" in native.status().flags


def test_built_once_recorded_and_cached(
    pristine: tuple[build.Target, list[list[str]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done, commands = pristine
    # one compile (up to four where the compiler rejects the wide-vector or OpenMP flags, one
    # per variant tried), the last one cached
    assert 1 <= len(commands) <= len(build.VARIANTS)
    assert commands[-1][1 : 1 + len(done.flags)] == list(done.flags)
    assert done.flags in build.VARIANTS
    assert sorted(p.name for p in done.path.parent.iterdir()) == sorted(
        [done.path.name, done.record.name]
    )  # no temporary files left
    assert build.verify(done) is None
    monkeypatch.setenv("GMTS_NATIVE_CACHE", str(done.path.parent))
    found = build.status()
    assert found.state == "ready" and found.library == done.path
    assert found.sha256 == build.sha256_file(done.path)
    mode = done.path.stat().st_mode
    assert not mode & (stat.S_IWGRP | stat.S_IWOTH)


def test_good_cache_is_loaded_without_compiling(
    cache: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gmts_core.native"):
        assert native.library() is not None
    assert cache.compiles == 0 and cache.loaded == [cache.good_sha]
    assert caplog.text == ""


def test_tampered_library_is_refused_and_rebuilt(
    cache: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    data = bytearray(cache.library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cache.library.write_bytes(bytes(data))
    assert "does not match its recorded SHA-256" in (build.verify(cache.target()) or "")
    with caplog.at_level(logging.WARNING, logger="gmts_core.native"):
        assert native.library() is not None
    assert caplog.text.count("refused the cached library") == 1
    assert cache.compiles == 1 and cache.loaded == [cache.good_sha]  # never the changed bytes
    assert build.verify(cache.target()) is None


def test_missing_record_is_refused(cache: Cache) -> None:
    cache.target().record.unlink()  # e.g. a library cached by an earlier version
    assert "is missing" in (build.verify(cache.target()) or "")
    assert native.library() is not None and cache.compiles == 1


def test_writable_library_is_refused(cache: Cache, caplog: pytest.LogCaptureFixture) -> None:
    cache.library.chmod(0o757)  # world-writable
    assert "writable by its group or by others" in (build.verify(cache.target()) or "")
    with caplog.at_level(logging.WARNING, logger="gmts_core.native"):
        assert native.library() is not None
    assert "refused the cached library" in caplog.text and cache.compiles == 1
    assert not cache.library.stat().st_mode & stat.S_IWOTH  # the rebuilt one is private


def test_writable_folder_is_not_used(cache: Cache, caplog: pytest.LogCaptureFixture) -> None:
    """A folder others can write to: nothing built in it or loaded from it; PyTorch's ops."""
    cache.folder.chmod(0o777)
    logits, targets = torch.randn(2, 30), torch.tensor([0, 1])
    with caplog.at_level(logging.WARNING, logger="gmts_core.native"):
        assert native.library() is None
    assert "UnsafeCache" in caplog.text and "writable by its group or by others" in caplog.text
    assert cache.compiles == 0 and cache.loaded == []
    assert not native.row_sums_supported(logits, 2)
    assert metrics.token_stats(logits, targets, top_k=3).entropy.isfinite().all()
    assert build.status().state == "refused"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root (chown)")
def test_library_of_another_user_is_refused(cache: Cache) -> None:
    os.chown(cache.library, 12345, -1)
    assert "owned by uid 12345" in (build.verify(cache.target()) or "")
    assert native.library() is not None and cache.compiles == 1
    assert cache.library.stat().st_uid == os.geteuid()
    assert cache.loaded == [cache.good_sha]


def test_status_without_a_build_or_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GMTS_NATIVE_CACHE", str(tmp_path / "empty"))
    found = build.status()
    assert found.state == "not built" and found.library is None
    assert not (tmp_path / "empty").exists()  # status compiles and creates nothing
    (tmp_path / "empty").mkdir(mode=0o700)
    assert build.status().state == "not built"
    (tmp_path / "empty").chmod(0o777)
    found = build.status()
    assert found.state == "refused" and "writable by its group or by others" in (found.reason or "")
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    assert build.status().state == "no compiler"


def test_a_compiler_without_openmp_builds_the_serial_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiler that rejects ``-fopenmp`` (as Apple's clang does) still builds the kernels,
    with the wide-vector flag and without OpenMP; their rows then run serially, with the same
    numbers at any torch thread count."""
    real = native.compiler()
    assert real is not None
    wrapper = tmp_path / "cc-without-openmp"
    wrapper.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = "-fopenmp" ] && { echo "unsupported: -fopenmp" >&2; exit 1; }; '
        "done\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o700)
    folder = tmp_path / "cache"
    monkeypatch.setenv("GMTS_NATIVE_CACHE", str(folder))
    done = build.ensure_built(str(wrapper))
    assert "-fopenmp" not in done.flags and done.flags in build.VARIANTS
    lib = native._declare(native.ctypes.CDLL(str(done.path)))
    probs = torch.softmax(torch.randn(9, 40, generator=torch.Generator().manual_seed(0)), -1)
    uniforms = torch.rand(9, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    drawn = []
    for threads in (1, 2):
        tokens = torch.empty(9, dtype=torch.int64)
        uncertain = torch.empty(9, dtype=torch.bool)
        lib.gmts_categorical(
            probs.data_ptr(), uniforms.data_ptr(), 9, 40, 2.0**-16,
            tokens.data_ptr(), uncertain.data_ptr(), threads,
        )  # fmt: skip
        drawn.append(tokens)
    want = torch.argmax(probs / (-torch.log1p(-uniforms)).float(), dim=1)
    assert torch.equal(drawn[0], drawn[1]) and torch.equal(drawn[0], want)
