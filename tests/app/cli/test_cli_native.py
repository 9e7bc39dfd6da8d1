"""`gmts native build` and `gmts native info`: compile the kernels ahead, and say where they are."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import load_commands
from gmts_core import native
from gmts_core.native import build


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("GMTS_NATIVE_CACHE", str(folder))
    monkeypatch.delenv("GMTS_NATIVE", raising=False)
    return folder


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler here: nothing to build")
def test_build_then_info(cache: Path) -> None:
    cli, runner = load_commands(), CliRunner()
    before = runner.invoke(cli, ["native", "info"])
    assert before.exit_code == 1 and "state: not built" in before.stdout
    assert f"cache: {cache}" in before.stdout and "-ffp-contract=off" in before.stdout
    built = runner.invoke(cli, ["native", "build"])
    assert built.exit_code == 0, built.output
    library = Path(built.stdout.strip())  # stdout: the library's path alone
    assert library.parent == cache and library.suffix == ".so" and library.is_file()
    assert library.with_suffix(".json").is_file()  # its recorded SHA-256
    stamp = library.stat().st_mtime_ns
    info = runner.invoke(cli, ["native", "info"])
    assert info.exit_code == 0, info.output
    assert "state: ready" in info.stdout and f"library: {library}" in info.stdout
    assert f"sha256: {build.sha256_file(library)}" in info.stdout
    again = runner.invoke(cli, ["native", "build"])  # cached: the same file, not rebuilt
    assert again.exit_code == 0 and again.stdout.strip() == str(library)
    assert library.stat().st_mtime_ns == stamp


def test_build_without_a_compiler_fails_clearly(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    r = CliRunner().invoke(load_commands(), ["native", "build"])
    assert r.exit_code == 1 and "no C compiler found" in r.output
    info = CliRunner().invoke(load_commands(), ["native", "info"])
    assert info.exit_code == 1 and "state: no compiler" in info.stdout


def test_the_image_builds_the_kernels_as_its_user_after_installing() -> None:
    """The Dockerfile runs `gmts native build` once the package is installed, as the user the
    server runs as (a cached library loads only for its owner)."""
    lines = (Path(__file__).resolve().parents[3] / "Dockerfile").read_text().splitlines()
    build_at = lines.index("RUN gmts native build")
    install_at = next(i for i, line in enumerate(lines) if line.startswith("RUN pip install /tmp"))
    users = [i for i, line in enumerate(lines) if line.startswith("USER ")]
    assert install_at < build_at and users and users[-1] < build_at
    assert lines[users[-1]] == "USER gmts"
