"""`gmts` starts without the heavy libraries: its help is drawn from the command table, a
command's module is imported only when it is used, and every command's ``--help`` (each one the
CLI's own parser lists, so a new command is checked without a new line here) imports no torch,
transformers or gradio: the options read their knobs from torch-free config modules."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import typer

from app.cli import load_commands
from app.cli._app import COMMANDS

HEAVY = ("torch", "transformers", "gradio")

# runs `gmts ARGS...` in a fresh interpreter and prints which heavy modules it imported
_PROBE = """
import json, sys
from app.cli import main
sys.argv = ["gmts", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def imported_by(args: list[str]) -> tuple[list[str], str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    *help_lines, last = out.rstrip("\n").split("\n")
    return json.loads(last), "\n".join(help_lines)


def command_paths() -> list[list[str]]:
    """Every command and subcommand of `gmts`, as its words, read from the CLI itself."""
    group: Any = typer.main.get_command(load_commands())
    paths = []
    for name, command in sorted(group.commands.items()):
        paths.append([name])
        paths += [[name, sub] for sub in sorted(getattr(command, "commands", {}) or {})]
    return paths


@pytest.mark.parametrize(
    "args",
    [["--help"], []] + [[*p, "--help"] for p in command_paths()],
    ids=lambda a: " ".join(a) or "(none)",
)
def test_help_imports_no_heavy_library(args: list[str]) -> None:
    heavy, text = imported_by(args)
    assert heavy == []
    assert "Usage: gmts" in text


def test_help_lists_every_command() -> None:
    _, text = imported_by(["--help"])
    for name in COMMANDS:
        assert f" {name} " in text


def _module_of(command: Any) -> str:
    if command.callback is not None:
        return str(command.callback.__module__)
    return _module_of(next(iter(command.commands.values())))  # a group: its first command's


def test_command_table_matches_the_commands() -> None:
    group: Any = typer.main.get_command(load_commands())
    assert sorted(group.commands) == sorted(COMMANDS)  # the order: which test loaded which first
    for name, command in group.commands.items():
        module, short_help = COMMANDS[name]
        assert _module_of(command) == f"app.cli.{module}"
        assert command.get_short_help_str(limit=1000) == short_help


# runs `gmts native info` in a fresh interpreter, then loads torch (if the command did not);
# OMP_DISPLAY_ENV makes the OpenMP runtime print the settings it started with
_POLICY_PROBE = """
import sys
from app.cli import main
sys.argv = ["gmts", "native", "info"]
try:
    main()
except SystemExit:
    pass
import torch
torch.ones(4).sum()
"""


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_commands_run_with_sleeping_openmp_threads(given: str | None) -> None:
    """Every command's OpenMP runtime starts with OMP_WAIT_POLICY=PASSIVE (set before torch
    loads it), unless the user chose a policy."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    out = subprocess.run(
        [sys.executable, "-c", _POLICY_PROBE],
        capture_output=True, text=True, timeout=300, check=True, env=env,
    )  # fmt: skip
    shown = out.stderr + out.stdout
    if given is None:  # unset, the runtime would spin 300,000 times before it sleeps
        assert "OMP_WAIT_POLICY = 'PASSIVE'" in shown and "GOMP_SPINCOUNT = '0'" in shown
    else:
        assert f"OMP_WAIT_POLICY = '{given}'" in shown
