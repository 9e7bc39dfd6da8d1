"""The verl compatibility module refuses, at import, a verl release outside its tested range or
one lacking a name the integration replaces or calls; the range holds requirements-verl.txt's."""

from __future__ import annotations

import importlib
import importlib.util
import re
import types
from pathlib import Path

import pytest
import verl

from gmts_core.integrations import verl_compat
from gmts_core.integrations.releases import UnsupportedReleaseError

ROOT = Path(__file__).resolve().parents[2]


def import_fresh() -> types.ModuleType:
    """Run verl_compat's module code again (the import-time checks), outside sys.modules."""
    spec = importlib.util.find_spec("gmts_core.integrations.verl_compat")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_installed_release_is_the_tested_one_and_imports():
    assert import_fresh().VERL_RELEASES == verl_compat.VERL_RELEASES
    (pinned,) = re.findall(r"^verl==(\S+)$", (ROOT / "requirements-verl.txt").read_text(), re.M)
    assert verl.__version__ == pinned
    assert pinned in verl_compat.VERL_RELEASES.tested and verl_compat.VERL_RELEASES.floor == pinned


@pytest.mark.parametrize("version", ["0.9.0", "0.8.0", "0.10.0", "0.10.0.dev0", "1.0.0"])
def test_import_refuses_a_release_outside_the_range(monkeypatch, version):
    monkeypatch.setattr(verl, "__version__", version)
    with pytest.raises(UnsupportedReleaseError) as raised:
        import_fresh()
    assert f"verl {version} is installed" in str(raised.value)
    assert "verl>=0.9.1,<0.10 (tested on 0.9.1)" in str(raised.value)


@pytest.mark.parametrize(
    ("module", "owner", "name"),
    [
        (module, owner, name)
        for module, (owner, names) in verl_compat.REQUIRED.items()
        for name in names
    ],
)
def test_import_refuses_a_release_without_a_name_it_relies_on(monkeypatch, module, owner, name):
    target = importlib.import_module(module)
    if owner:  # a class: gone from every class it inherits the name from
        for cls in getattr(target, owner).__mro__:
            if name in vars(cls):
                monkeypatch.delattr(cls, name)
    else:
        monkeypatch.delattr(target, name)
    with pytest.raises(UnsupportedReleaseError, match=rf"lacks {name} on {re.escape(module)}"):
        import_fresh()


def test_import_refuses_a_release_without_a_module(monkeypatch):
    monkeypatch.setitem(verl_compat.REQUIRED, "verl.workers.gone", ("", ("x",)))
    with pytest.raises(UnsupportedReleaseError, match="lacks the module verl.workers.gone"):
        verl_compat.check_verl(verl.__version__)
