#!/usr/bin/env bash
# CPU-side step before a GPU check: download the wheels a bare GPU machine lacks into
# gpu-wheels/ (git-ignored; it travels with the working tree to the GPU machine).
#
#   scripts/gpu_wheels.sh [WHEEL_DIR]        (default: gpu-wheels)
#
# The GPU machine is assumed to have Python 3.12 (x86-64 Linux) with torch, transformers,
# accelerate, peft, pandas and pyarrow, and no network. What the GPU check needs beyond that:
# pytest (+ pluggy, iniconfig, pytest-timeout) for the `gpu` tests, and TRL with datasets
# (+ dill, multiprocess, xxhash, fsspec) for the TRL-in-bf16 test. Versions are those of this
# project's .venv, so both machines run the same code. No dependencies are resolved (--no-deps):
# everything else is already on the GPU machine. scripts/gpu_check.sh unpacks the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-gpu-wheels}"
PY="${PY:-.venv/bin/python}"
PACKAGES=(pytest pluggy iniconfig pytest-timeout trl datasets dill multiprocess xxhash fsspec)

pins=()
for pkg in "${PACKAGES[@]}"; do
    pins+=("$pkg==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$pkg")")
done
mkdir -p "$DIR"
"$PY" -m pip download --dest "$DIR" --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any \
    "${pins[@]}"
ls -l "$DIR"
