#!/usr/bin/env bash
# GMTS on verl 0.9.1 on one GPU, in minutes: Qwen2.5-0.5B-Instruct on GSM8K, 4 prompts x 8
# answers a step, two PPO mini-batches per step (so the selection is re-made at the updated
# policy), dynamic batch sizes and sequence packing on. scripts/gpu_check_verl.sh runs it for a
# few steps with a local model folder and a tiny made-up data set.
#
#   Data: any parquet with verl's columns (data_source,
#   prompt as chat messages, reward_model.ground_truth) works, e.g. verl's
#   examples/data_preprocess/gsm8k.py output.
#   MODEL=Qwen/Qwen2.5-0.5B-Instruct TRAIN=~/data/gsm8k/train.parquet TEST=~/data/gsm8k/test.parquet \
#       bash examples/verl/run_small_one_gpu.sh [trainer.total_training_steps=3 ...]
#
# LOSS_MODE=gmts | gmts_entropy | gmts_paper | gmts_paper_verl (default gmts). Open
# $OUT/rollouts in the Runs tab afterwards: it shows the tokens each step trained.
set -euo pipefail
MODEL="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"
TRAIN="${TRAIN:-$HOME/data/gsm8k/train.parquet}"
TEST="${TEST:-$HOME/data/gsm8k/test.parquet}"
OUT="${OUT:-$PWD/outputs/verl_small_gmts}"
LOSS_MODE="${LOSS_MODE:-gmts}"
export PYTHONPATH="$(cd "$(dirname "$0")/../.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
# Attention: flash_attention_2 with sequence packing (use_remove_padding) where flash-attn imports
# in this Python, else PyTorch's sdpa on padded batches (verl's default, flash_attention_2, raises
# ImportError without flash-attn, which `pip install "verl[vllm]"` does not bring). ATTN=sdpa or
# ATTN=flash_attention_2 chooses.
if [ -z "${ATTN:-}" ]; then
    if python3 -c "import flash_attn" >/dev/null 2>&1; then ATTN=flash_attention_2; else ATTN=sdpa; fi
fi
if [ "$ATTN" = flash_attention_2 ]; then RMPAD=True; else RMPAD=False; fi

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$TRAIN" \
    data.val_files="$TEST" \
    data.train_batch_size=4 \
    data.max_prompt_length=256 \
    data.max_response_length=256 \
    data.filter_overlong_prompts=True \
    actor_rollout_ref.model.path="$MODEL" \
    +actor_rollout_ref.model.override_config.attn_implementation="$ATTN" \
    actor_rollout_ref.model.use_remove_padding="$RMPAD" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=2 \
    actor_rollout_ref.actor.use_dynamic_bsz=True \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096 \
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=8192 \
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=8192 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.actor.policy_loss._target_=gmts_core.integrations.verl.GMTSPolicyLossConfig \
    actor_rollout_ref.actor.policy_loss.loss_mode="$LOSS_MODE" \
    +actor_rollout_ref.actor.policy_loss.gmts_ratio=0.2 \
    +actor_rollout_ref.actor.policy_loss.gmts_log_dir="$OUT/rollouts" \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    trainer.logger='["console"]' \
    trainer.project_name=gmts \
    trainer.experiment_name=verl_small_gmts \
    trainer.default_local_dir="$OUT/checkpoints" \
    trainer.rollout_data_dir="$OUT/rollouts" \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=-1 \
    trainer.val_before_train=False \
    trainer.total_epochs=1 "$@"
