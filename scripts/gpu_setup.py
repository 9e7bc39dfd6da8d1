"""Make the packages a bare GPU machine lacks importable, from a folder of wheels, offline.

    python3 scripts/gpu_setup.py WHEEL_DIR TARGET_DIR

For each ``*.whl`` in WHEEL_DIR whose distribution the running Python does not already have,
the wheel is unpacked into TARGET_DIR (a wheel is a zip of importable files; unpacking it is
what ``pip install --target`` does for the pure and manylinux wheels used here, and needs no
pip and no network). Put TARGET_DIR on PYTHONPATH afterwards. Distributions already installed
are left alone, so the machine's own torch, transformers, numpy ... are never shadowed.
Prints one line per wheel; exit status 1 if a wheel cannot be read.

WHEEL_DIR is filled on a machine with network by ``scripts/gpu_wheels.sh``.
"""

from __future__ import annotations

import re
import sys
import zipfile
from importlib import metadata
from pathlib import Path


def distribution_name(wheel: Path) -> str:
    """The normalized distribution name of a wheel file (PEP 427: name-version-...whl)."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def installed(name: str) -> bool:
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def unpack(wheels: Path, target: Path) -> list[str]:
    """Unpack the wheels whose distributions are missing; returns one report line per wheel."""
    target.mkdir(parents=True, exist_ok=True)
    lines = []
    for wheel in sorted(wheels.glob("*.whl")):
        name = distribution_name(wheel)
        if installed(name):
            lines.append(f"have     {name} (installed: {metadata.version(name)})")
            continue
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(target)
        lines.append(f"unpacked {wheel.name}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    wheels, target = Path(argv[0]), Path(argv[1])
    if not wheels.is_dir():
        print(f"gpu_setup: no wheel folder {wheels} (see scripts/gpu_wheels.sh)", file=sys.stderr)
        return 1
    try:
        for line in unpack(wheels, target):
            print(line)
    except (OSError, zipfile.BadZipFile) as exc:
        print(f"gpu_setup: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
