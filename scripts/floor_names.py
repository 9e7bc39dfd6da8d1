"""The names gmts_core and app import from their model-side dependencies, checked at the floor of
each one's declared range (pyproject.toml).

    .venv/bin/python scripts/floor_names.py --record [FOLDER]

installs the floors (``pip install --no-deps --target``: transformers, trl, accelerate, peft,
gguf, tokenizers, safetensors at their declared floors, with the helper pins the floors need to
import, :data:`HELPERS`) into a scratch folder (FOLDER, kept and reused, or a new temporary
one), imports every name the code imports from them there (the rest of the environment is
.venv's), imports the TRL compatibility module there (its own import-time checks of TRL's
private names), and writes what it found to ``tests/data/floor_names.json``; exit status 1 when
a name is missing at a floor. About a minute and 40 MB of downloads on an idle machine.

``tests/test_floor_names.py`` (in ``make test``, well under a second) reads the code's imports
again and fails when one is not in the record, or when pyproject's floors are not the recorded
ones: a name the code starts to use, or a floor that moves, has to be checked by ``--record``
first. What this does not check: behaviour at the floors (only that the names exist), and the
floors of the other dependencies (torch, numpy, the web stack).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "data" / "floor_names.json"
PACKAGES = ("transformers", "trl", "accelerate", "peft", "gguf", "tokenizers", "safetensors")
# what the floors need beside them to import: transformers 4.57.1 refuses huggingface_hub 1.x,
# and TRL imports datasets (4.7.0: TRL 1.15's floor; newer ones need huggingface_hub 1.x)
HELPERS = ("huggingface_hub==0.36.0", "datasets==4.7.0")
COMPAT_MODULES = ("gmts_core.integrations.trl_compat",)


def declared_floors(pyproject: str) -> dict[str, str]:
    """Each package's floor as pyproject declares it (``name>=X``), in the base dependencies or,
    for those not there, the ``[dev]`` extra."""
    floors: dict[str, str] = {}
    for package in PACKAGES:
        found = re.findall(rf'"{package}(?:\[[^\]]*\])?>=([\w.]+)', pyproject)
        if found:
            floors[package] = found[0]
    return floors


def used_names(roots: list[Path]) -> set[str]:
    """``module:name`` for every name the code under ``roots`` imports from :data:`PACKAGES`
    (``from m import n``; ``import m`` then ``m.n``), wherever the import stands."""
    names: set[str] = set()
    for root in roots:
        for path in root.rglob("*.py"):
            names |= _file_names(ast.parse(path.read_text(encoding="utf-8")))
    return names


def _file_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in PACKAGES:
                names |= {f"{node.module}:{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    names.add(f"{a.name}:")
                    top = a.name.split(".")[0]  # what a plain `import m.n` binds
                    aliases[a.asname or top] = a.name if a.asname else top
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            names.add(f"{aliases[node.value.id]}:{node.attr}")
    return names


_CHECK = """
import importlib, importlib.metadata, json, sys
found = {}
for entry in json.loads(sys.argv[1]):
    module, _, name = entry.partition(":")
    try:
        owner = importlib.import_module(module)
        if name and not hasattr(owner, name):
            importlib.import_module(f"{module}.{name}")
        found[entry] = True
    except Exception as exc:
        found[entry] = f"{type(exc).__name__}: {exc}"[:300]
for module in json.loads(sys.argv[2]):
    try:
        importlib.import_module(module)
        found[f"{module}:"] = True
    except Exception as exc:
        found[f"{module}:"] = f"{type(exc).__name__}: {exc}"[:300]
versions = {}
for package in json.loads(sys.argv[3]):
    try:
        versions[package] = importlib.metadata.version(package)  # the first on the path
    except Exception as exc:
        versions[package] = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps({"found": found, "versions": versions}))
"""


def _release(version: str) -> tuple[int, ...]:
    numbers = tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])
    return numbers + (0,) * (3 - len(numbers))


def record(folder: Path) -> int:
    """Install the floors into ``folder`` (kept: a second run reuses it), check there, write
    the record; 1 when a name is missing at a floor."""
    floors = declared_floors((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    names = sorted(used_names([ROOT / "gmts_core", ROOT / "app"]))
    pins = [f"{p}=={v}" for p, v in floors.items()] + list(HELPERS)
    stamp = folder / "floor-pins.txt"
    if not stamp.is_file() or stamp.read_text() != "\n".join(pins):
        shutil.rmtree(folder, ignore_errors=True)  # no other release's metadata left behind
        folder.mkdir(parents=True)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
        subprocess.run(pip + ["--target", str(folder)] + pins, check=True)
        stamp.write_text("\n".join(pins))
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHECK,
            json.dumps(names),
            json.dumps(COMPAT_MODULES),
            json.dumps(list(floors)),
        ],
        env={"PYTHONPATH": f"{folder}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(folder)},
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        print(run.stderr, file=sys.stderr)
        return 1
    result = json.loads(run.stdout.strip().splitlines()[-1])
    imported = {p: _release(v) for p, v in result["versions"].items()}
    assert imported == {p: _release(v) for p, v in floors.items()}, result["versions"]
    missing = {k: v for k, v in result["found"].items() if v is not True}
    RECORD.write_text(
        json.dumps(
            {"floors": floors, "helpers": list(HELPERS), "present": sorted(result["found"])}
            if not missing
            else {"floors": floors, "helpers": list(HELPERS), "missing": missing},
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    for name, why in missing.items():
        print(f"missing at the floor: {name}: {why}")
    return 1 if missing else 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["--record"] or len(sys.argv) > 3:
        sys.exit(__doc__)
    scratch = Path(sys.argv[2]) if len(sys.argv) == 3 else Path(tempfile.mkdtemp(prefix="floors-"))
    sys.exit(record(scratch))
