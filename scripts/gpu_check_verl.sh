#!/usr/bin/env bash
# GMTS on verl with a GPU: the small one-GPU recipe (examples/verl/run_small_one_gpu.sh) for 3
# steps with verl's real FSDP engine and vLLM rollout, on the bundled demo model and task (made
# offline by scripts/gpu_check_verl_setup.py), then checks that the rollout folder opens in the
# Runs reader as the token log and that each step trained about ratio of its tokens. This is
# what the CPU tests cannot run: verl 0.9.1 registers its training engines for cuda/npu only.
#
#   PY=/path/with/verl+vllm/bin/python scripts/gpu_check_verl.sh [RESULTS_DIR]
#
# Needs a Python with verl 0.9.1, vllm and a CUDA torch (verl's `vllm` extra); no network.
# Writes RESULTS_DIR/{setup.txt,train.log,check.txt}. Exit 0 when it trained and the log checks
# out, 1 otherwise, 2 without CUDA. GMTS_VERL_STEPS (default 3), LOSS_MODE (default gmts), ATTN
# (default: flash_attention_2 where flash-attn imports, else sdpa). The install it was written
# for: examples/verl/constraints.txt (docs/training-verl.md, "Install for a GPU").
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
DIR="${1:-gpu-check-results/verl}"
STEPS="${GMTS_VERL_STEPS:-3}"
mkdir -p "$DIR"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check_verl: no CUDA device" >&2
    exit 2
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gmts-verl.XXXXXX")"
"$PY" scripts/gpu_check_verl_setup.py "$WORK" > "$DIR/setup.txt" 2>&1 || { cat "$DIR/setup.txt"; exit 1; }
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$(dirname "$PY"):$PATH"  # the recipe calls python3
# the recipe's attention: flash_attention_2 + sequence packing where flash-attn imports, else sdpa
# on padded batches (verl[vllm] brings no flash-attn); ATTN=sdpa|flash_attention_2 forces one
if [ -z "${ATTN:-}" ]; then
    if "$PY" -c "import flash_attn" >/dev/null 2>&1; then ATTN=flash_attention_2; else ATTN=sdpa; fi
fi
export ATTN
echo "gpu_check_verl: attention $ATTN" | tee -a "$DIR/setup.txt"
MODEL="$WORK/model" TRAIN="$WORK/data/train.parquet" TEST="$WORK/data/test.parquet" \
OUT="$WORK/out" LOSS_MODE="${LOSS_MODE:-gmts}" \
    bash examples/verl/run_small_one_gpu.sh \
    trainer.total_training_steps="$STEPS" \
    data.max_prompt_length=32 data.max_response_length=48 \
    reward.custom_reward_function.path="$PWD/scripts/gpu_check_verl_setup.py" \
    reward.custom_reward_function.name=compute_score \
    > "$DIR/train.log" 2>&1
status=$?
tail -n 20 "$DIR/train.log"
if [ $status -ne 0 ]; then echo "gpu_check_verl: training failed ($status)"; exit 1; fi
"$PY" - "$WORK/out/rollouts" "$STEPS" > "$DIR/check.txt" 2>&1 <<'PYEOF'
import sys
from gmts_core.runs import open_run

run = open_run(sys.argv[1])
assert run.format == "gmts_trainer_log", run.format
assert len(run.steps) == int(sys.argv[2]), run.steps
for number in run.steps:
    step = run.step(number)
    sel = [s for g in step.groups for a in g.token_columns["selected"] for s in a]
    share = sum(map(bool, sel)) / max(len(sel), 1)
    print(f"step {number}: {len(step.groups)} groups, {len(sel)} tokens, trained {share:.3f}")
    assert 0.0 < share < 0.5, share
print("ok")
PYEOF
status=$?
cat "$DIR/check.txt"
rm -rf "$WORK"
exit $status
