"""The TRL compatibility module refuses, at import, a TRL release outside its tested range or one
lacking a private name GMTSGRPOTrainer overrides; the supported range is pyproject's floor."""

from __future__ import annotations

import importlib.util
import re
import types
from pathlib import Path

import pytest
import trl
from trl import GRPOTrainer
from trl.trainer import utils as trl_utils

from gmts_core.integrations import trl_compat
from gmts_core.integrations.releases import UnsupportedReleaseError

ROOT = Path(__file__).resolve().parents[3]


def import_fresh() -> types.ModuleType:
    """Run trl_compat's module code again (the import-time checks), outside sys.modules."""
    spec = importlib.util.find_spec("gmts_core.integrations.trl_compat")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_installed_release_is_supported_and_imports() -> None:
    assert import_fresh().TRL_RELEASES == trl_compat.TRL_RELEASES
    assert trl.__version__ in trl_compat.TRL_RELEASES.tested  # the suite runs a tested release


@pytest.mark.parametrize("version", ["1.15.0", "1.17.0", "1.17.0.dev0", "2.0.0", "1.16.0rc1"])
def test_import_refuses_a_release_outside_the_range(
    monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    monkeypatch.setattr(trl, "__version__", version)
    with pytest.raises(UnsupportedReleaseError) as raised:
        import_fresh()
    message = str(raised.value)
    assert f"trl {version} is installed" in message
    assert "trl>=1.16,<1.17 (tested on 1.16.0)" in message


@pytest.mark.parametrize("version", ["1.16.0", "1.16.2", "1.16.1.post1"])
def test_a_release_inside_the_range_passes(version: str) -> None:
    trl_compat.check_trl(version)


@pytest.mark.parametrize("name", trl_compat.PRIVATE_METHODS)
def test_import_refuses_a_release_without_an_overridden_private_method(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    owner = next(c for c in GRPOTrainer.__mro__ if name in vars(c))  # where TRL defines it
    monkeypatch.delattr(owner, name)
    with pytest.raises(UnsupportedReleaseError, match=rf"lacks {name} on trl\.GRPOTrainer"):
        import_fresh()


def test_import_refuses_a_release_without_the_fused_lm_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(trl_utils, "add_fused_lm_head")
    with pytest.raises(UnsupportedReleaseError, match="lacks add_fused_lm_head on trl.trainer"):
        import_fresh()


def test_a_trainer_without_an_attribute_gmts_reads_is_refused() -> None:
    present = {name: None for name in trl_compat.TRAINER_ATTRIBUTES if name != "_metrics"}
    with pytest.raises(UnsupportedReleaseError, match="lacks _metrics on a GRPOTrainer"):
        trl_compat.GRPOTrainerHooks.check_attributes(types.SimpleNamespace(**present))  # type: ignore[arg-type]
    everything = types.SimpleNamespace(_metrics=None, **present)
    trl_compat.GRPOTrainerHooks.check_attributes(everything)  # type: ignore[arg-type]


def test_the_range_is_the_declared_one() -> None:
    """pyproject's [trl] and [dev] extras declare the range the compatibility module checks."""
    declared = re.findall(r'"trl([<>=!,.\d]*)"', (ROOT / "pyproject.toml").read_text())
    releases = trl_compat.TRL_RELEASES
    assert len(declared) == 2 and set(declared) == {f">={releases.floor},<{releases.below}"}
