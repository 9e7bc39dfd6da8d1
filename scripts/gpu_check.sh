#!/usr/bin/env bash
# GPU check: run the tests marked `gpu` and the token-statistics benchmark on CUDA (vocabulary
# 151,936), then write a Markdown summary for the README.
#
#   scripts/gpu_check.sh [RESULTS_DIR]        (default: gpu-check-results)
#
# Needs a CUDA build of torch in .venv (or PY=/path/to/python). Writes into RESULTS_DIR:
# environment.txt, pytest-gpu.{txt,xml}, token_stats_{float32,bfloat16}.{json,txt}, summary.md
# (the summary, by scripts/gpu_check_summary.py, is what goes into the README).
# Exit status: 0 when the tests pass and the benchmark runs, 1 otherwise, 2 without CUDA.
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PY:-.venv/bin/python}"
DIR="${1:-gpu-check-results}"
mkdir -p "$DIR"

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: CUDA is not available to $PY (a CPU build of torch, or no GPU)" >&2
    exit 2
fi

"$PY" - > "$DIR/environment.txt" <<'EOF'
import torch, transformers, trl
p = torch.cuda.get_device_properties(0)
print(f"gpu: {p.name}, {p.total_memory / 2**30:.0f} GiB, {torch.cuda.device_count()} device(s)")
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers "
      f"{transformers.__version__}, trl {trl.__version__}")
print(f"bf16 supported: {torch.cuda.is_bf16_supported()}")
EOF
cat "$DIR/environment.txt"

echo "== pytest -m gpu"
"$PY" -m pytest -m gpu -q -rs -p no:cacheprovider --junitxml "$DIR/pytest-gpu.xml" \
    2>&1 | tee "$DIR/pytest-gpu.txt"
tests_rc=${PIPESTATUS[0]}

bench_rc=0
for dtype in float32 bfloat16; do
    echo "== benchmarks/token_stats.py --device cuda --dtype $dtype --json"
    if ! "$PY" benchmarks/token_stats.py --device cuda --dtype "$dtype" --json \
        > "$DIR/token_stats_$dtype.json" 2> "$DIR/token_stats_$dtype.txt"; then
        bench_rc=1
        tail -n 20 "$DIR/token_stats_$dtype.txt"
    fi
done

"$PY" scripts/gpu_check_summary.py "$DIR" "$tests_rc" "$bench_rc"

if [ "$tests_rc" -ne 0 ] || [ "$bench_rc" -ne 0 ]; then
    exit 1
fi
