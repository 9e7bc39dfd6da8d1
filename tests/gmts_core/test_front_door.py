"""The front door: the names a user needs come from ``gmts_core`` itself, loaded on first use, so
``import gmts_core`` stays light (no torch, no TRL) until a name is used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import gmts_core

ROOT = Path(__file__).resolve().parents[2]


def _fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter (this one has imported everything already)."""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_import_gmts_core_imports_neither_torch_nor_trl() -> None:
    out = _fresh(
        "import json, sys, gmts_core\n"
        "print(json.dumps({m: m in sys.modules for m in ('torch', 'trl', 'transformers')}))"
    )
    assert json.loads(out) == {"torch": False, "trl": False, "transformers": False}


def test_analyze_is_reached_from_the_front_door_without_trl() -> None:
    out = _fresh(
        "import sys, gmts_core\n"
        "from gmts_core.analysis.analyze import analyze\n"
        "assert gmts_core.analyze is analyze\n"
        "print('trl' in sys.modules)"
    )
    assert out.strip() == "False"


def test_every_exported_name_resolves_and_is_documented_in_all() -> None:
    assert sorted(gmts_core.__all__) == sorted(gmts_core._EXPORTS)  # noqa: SLF001
    for name in gmts_core.__all__:
        if name in ("GMTSGRPOTrainer", "GMTSGRPOConfig"):
            continue  # TRL: checked by the TRL integration's tests
        assert getattr(gmts_core, name) is not None
    assert set(gmts_core.__all__) <= set(dir(gmts_core))


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'analyse'"):
        gmts_core.analyse  # noqa: B018


def test_every_selection_method_is_registered_whichever_module_is_imported_first() -> None:
    out = _fresh(
        "from gmts_core.methods.selection import list_methods\nprint(','.join(list_methods()))"
    )
    assert {"entropy", "gmts", "clip_cov", "high_prob"} <= set(out.strip().split(","))
