"""Every name gmts_core and app import from transformers, trl, accelerate, peft, gguf, tokenizers
and safetensors was found at the floor of that package's declared range, by
``scripts/floor_names.py --record``, which installs the floors and imports the names there
(see its docstring for what it does not check)."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
RERUN = "re-check at the floors: .venv/bin/python scripts/floor_names.py --record"


def floor_names() -> ModuleType:
    spec = importlib.util.spec_from_file_location("floor_names", ROOT / "scripts/floor_names.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = floor_names()
RECORD = json.loads(SCRIPT.RECORD.read_text(encoding="utf-8"))


def test_every_imported_name_was_found_at_the_floor() -> None:
    assert "missing" not in RECORD, RECORD["missing"]
    used = SCRIPT.used_names([ROOT / "gmts_core", ROOT / "app"])
    unchecked = sorted(used - set(RECORD["present"]))
    assert not unchecked, f"not checked at the floors: {unchecked}; {RERUN}"
    assert {f"{m}:" for m in SCRIPT.COMPAT_MODULES} <= set(RECORD["present"])


def test_the_recorded_floors_are_the_declared_ones() -> None:
    declared = SCRIPT.declared_floors((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert declared == RECORD["floors"], RERUN
    assert set(declared) == set(SCRIPT.PACKAGES)


def test_the_scan_sees_every_form_of_import() -> None:
    """``from m import n`` (also inside a function), ``import m`` with ``m.n``, an alias."""
    code = (
        "import transformers\nimport trl.trainer as tt\nfrom peft import LoraConfig\n"
        "def f():\n    from gguf.quants import dequantize\n"
        "    return transformers.AutoConfig, tt.utils, numpy.x\n"
    )
    assert SCRIPT._file_names(ast.parse(code)) == {
        "transformers:",
        "transformers:AutoConfig",
        "trl.trainer:",
        "trl.trainer:utils",
        "peft:LoraConfig",
        "gguf.quants:dequantize",
    }
