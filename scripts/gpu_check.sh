#!/usr/bin/env bash
# The one GPU command: on a CUDA machine, run the `gpu` tests (among them the KV-cached
# sampler's round trip on CUDA: generate's draws and the analysed log-probs, fused and not), the
# token-statistics benchmark (float32 and bfloat16, vocabulary 151,936), the sampler benchmark
# (our sampler vs generate on the demo model and on a Qwen2-0.5B-shaped one in bfloat16) and the
# real-size benchmark (a Qwen2-0.5B-shaped model, 8 answers x 256 tokens, and a Qwen2-7B-shaped
# one in bfloat16, 16 x 1024), then write one Markdown summary. Under 9 minutes on one H200.
#
#   scripts/gpu_wheels.sh                      # first, on a machine with network (CPU side)
#   scripts/gpu_check.sh [RESULTS_DIR]         # then, on the GPU machine (default: gpu-check-results)
#   scripts/gpu_check.sh --dry-run [DIR]       # anywhere: the setup and the summary only
#
# The GPU machine may be bare: any python3 (PY=..., default .venv/bin/python if present, else
# python3) with torch, transformers, accelerate, peft, pandas and pyarrow; no network. What it
# lacks (pytest, TRL, datasets ...) comes from the wheel folder gpu-wheels/ (GMTS_GPU_WHEELS=...),
# unpacked into a temporary folder put on PYTHONPATH (scripts/gpu_setup.py); nothing is
# installed into the machine's Python.
#
# Writes into RESULTS_DIR: setup.txt, environment.txt, pytest-gpu.{txt,xml},
# token_stats_{float32,bfloat16}.{json,txt}, sampler_{demo,0.5b}.{json,txt},
# real_size_{0.5b,7b}.{json,txt}, summary.md
# (by scripts/gpu_check_summary.py; the summary is what goes into docs/benchmarks.md).
# Exit status: 0 when the tests pass and every benchmark runs, 1 otherwise, 2 without CUDA.
#
# GMTS_GPU_CHECK_DRY_RUN=1: only the setup (unpack the wheels, check that the GPU run's
# imports resolve) and the summary; the CUDA parts are skipped. The test suite runs this on CPU.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--dry-run" ]; then
    GMTS_GPU_CHECK_DRY_RUN=1
    shift
fi
if [ -z "${PY:-}" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
DIR="${1:-gpu-check-results}"
WHEELS="${GMTS_GPU_WHEELS:-gpu-wheels}"
DRY_RUN="${GMTS_GPU_CHECK_DRY_RUN:-0}"
mkdir -p "$DIR"

# --- setup: the missing packages from the wheel folder, into a temporary target ---------------
TARGET="$(mktemp -d "${TMPDIR:-/tmp}/gmts-gpu-site.XXXXXX")"
trap 'rm -rf "$TARGET"' EXIT
if [ -d "$WHEELS" ]; then
    if ! "$PY" scripts/gpu_setup.py "$WHEELS" "$TARGET" > "$DIR/setup.txt" 2>&1; then
        cat "$DIR/setup.txt" >&2
        exit 1
    fi
else
    echo "no wheel folder $WHEELS: using the packages $PY already has" > "$DIR/setup.txt"
fi
cat "$DIR/setup.txt"
export PYTHONPATH="$PWD:$TARGET${PYTHONPATH:+:$PYTHONPATH}"
# what the GPU run imports (GMTS_GPU_CHECK_IMPORTS: a different list, for the dry-run test)
IMPORTS="${GMTS_GPU_CHECK_IMPORTS:-pytest,pytest_timeout,trl,datasets,gmts_core.analysis.analyze,gmts_core.grpo.step}"
if ! "$PY" -c "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1].split(',')]" \
    "$IMPORTS" >> "$DIR/setup.txt" 2>&1; then
    echo "gpu_check: the setup left imports unresolved:" >&2
    tail -n 5 "$DIR/setup.txt" >&2
    exit 1
fi
echo "imports resolve: $IMPORTS" | tee -a "$DIR/setup.txt"

if [ "$DRY_RUN" = "1" ]; then
    echo "dry run (GMTS_GPU_CHECK_DRY_RUN=1): CUDA parts skipped" > "$DIR/environment.txt"
    "$PY" scripts/gpu_check_summary.py "$DIR" 0 0 > /dev/null
    echo "gpu_check: dry run done; summary in $DIR/summary.md"
    exit 0
fi

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

# only the files with `gpu` tests (token statistics and the whole analysis on CUDA in float32 and
# bfloat16 against the CPU, TRL's trainer for 2 steps, the sampler's round trip): the others
# import the web stack, which the machine lacks
echo "== pytest -m gpu"
timeout 120 "$PY" -m pytest -m gpu -q -rs -p no:cacheprovider --junitxml "$DIR/pytest-gpu.xml" \
    tests/gmts_core/test_gpu.py 2>&1 | tee "$DIR/pytest-gpu.txt"
tests_rc=${PIPESTATUS[0]}

bench_rc=0
bench() {  # bench NAME TIMEOUT_S ARGS...: run one benchmark with --json into NAME.json
    local name="$1" limit="$2"
    shift 2
    echo "== $* --json"
    if ! timeout "$limit" "$PY" "$@" --json > "$DIR/$name.json" 2> "$DIR/$name.txt"; then
        bench_rc=1
        tail -n 20 "$DIR/$name.txt"
    fi
}
for dtype in float32 bfloat16; do
    bench "token_stats_$dtype" 70 benchmarks/token_stats.py --device cuda --dtype "$dtype"
done
bench sampler_demo 40 benchmarks/sampler.py --device cuda --repeats 5
bench sampler_0.5b 60 benchmarks/sampler.py --device cuda --shape 0.5b --repeats 3
bench real_size_0.5b 80 benchmarks/real_size.py --device cuda --repeats 3
bench real_size_7b 110 benchmarks/real_size.py --device cuda --dtype bfloat16 --shape 7b \
    --answers 16 --tokens 1024 --no-sampled --repeats 3

# GMTS inside verl: the small one-GPU recipe for 2 steps with the paper's rule (gmts_paper),
# where a Python with verl + vLLM is given (VERL_PY=...; verl pins another transformers than
# this environment, so it is its own)
if [ -n "${VERL_PY:-}" ]; then
    echo "== scripts/gpu_check_verl.sh (PY=$VERL_PY, 2 steps, loss_mode=gmts_paper)"
    if ! timeout 420 env PY="$VERL_PY" GMTS_VERL_STEPS="${GMTS_VERL_STEPS:-2}" \
        LOSS_MODE="${LOSS_MODE:-gmts_paper}" bash scripts/gpu_check_verl.sh "$DIR/verl"; then
        bench_rc=1
    fi
else
    echo "== verl recipe skipped: set VERL_PY to a Python with verl 0.9.1 and vllm" | tee "$DIR/verl-skipped.txt"
fi

"$PY" scripts/gpu_check_summary.py "$DIR" "$tests_rc" "$bench_rc"

if [ "$tests_rc" -ne 0 ] || [ "$bench_rc" -ne 0 ]; then
    exit 1
fi
