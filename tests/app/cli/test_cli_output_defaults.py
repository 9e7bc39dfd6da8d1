"""No `gmts` command writes into the installed package by default (#38): every output option's
default is required, derived from an input, or a path under the current directory; and no
default path of any option lies inside the package's folders unless it is a known input (the
bundled model that `eval-demo` reads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

import app
import gmts_core
from app.cli import load_commands

PACKAGES = tuple(Path(p.__file__).resolve().parent for p in (gmts_core, app))
OUTPUT_NAMES = {"out", "output", "output_dir", "out_dir", "save_dir"}
OUTPUT_FLAGS = {"-o", "--out", "--output", "--output-dir", "--out-dir"}
# (command, option) -> why its default may point into the package: it is read, never written
PACKAGE_INPUTS = {("eval-demo", "model"): "the bundled model it evaluates"}


def _options() -> list[tuple[str, Any]]:
    """(command path, click parameter) of every option and argument of every command."""
    found: list[tuple[str, Any]] = []

    def walk(command: Any, path: str) -> None:
        found.extend((path, param) for param in command.params)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(load_commands()), "")
    return found


def _inside_package(path: Path) -> bool:
    return any(path.resolve().is_relative_to(p) for p in PACKAGES)


def test_output_options_default_to_the_current_directory(tmp_path: Path) -> None:
    outputs = {
        (cmd, p.name): p.default
        for cmd, p in _options()
        if p.name in OUTPUT_NAMES or OUTPUT_FLAGS & set(p.opts)
    }
    # the commands that write files, each found (a renamed option would escape the check)
    assert {("compare", "out"), ("train-demo", "out"), ("analyze-run", "output"),
            ("analyze-file", "output")} <= outputs.keys()  # fmt: skip
    for (cmd, name), default in outputs.items():
        if default is None:  # required, or derived from an input (analyze-file: beside it)
            continue
        path = Path(default)
        assert not path.is_absolute(), f"gmts {cmd} --{name} defaults to {path}"
        assert (tmp_path / path).resolve().is_relative_to(tmp_path), (cmd, name, path)


def test_no_default_points_into_the_package_unless_it_is_read() -> None:
    found = {}
    for cmd, param in _options():
        defaults = param.default if isinstance(param.default, (list, tuple)) else [param.default]
        for value in defaults:
            if isinstance(value, (str, Path)) and str(value) and _inside_package(Path(value)):
                found[(cmd, param.name)] = value
    assert found.keys() == PACKAGE_INPUTS.keys(), found
