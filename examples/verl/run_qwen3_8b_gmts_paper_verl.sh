#!/usr/bin/env bash
# GMTS on verl 0.9.1: the settings of the GMTS paper's Framework2 script
# (GMTS-Framework2/examples/dapo_trainer/run_qwen3_8b_qwa.sh: Qwen3-8B, DAPO-style clip-higher,
# token-mean, 16 answers per prompt, 512 prompts a step in mini-batches of 32, dynamic batch
# sizes, no KL) on stock verl, with the selection of gmts_core.integrations.verl instead of a
# forked dp_actor.py. One node of 8 GPUs.
#
#   export PYTHONPATH=/path/to/gmts-explorer:$PYTHONPATH   # gmts_core importable by Ray workers
#   MODEL=Qwen/Qwen3-8B TRAIN=~/data/math/train.parquet TEST=~/data/math/test.parquet \
#       bash examples/verl/run_qwen3_8b_gmts_paper_verl.sh
#
# The fork's `doing_entropy_clipping_percent=0.8` (the share removed) is gmts_ratio=0.2 (the
# share kept). Selection per uid group at the current policy before every PPO mini-batch
# (gmts_reselect=mini_batch), every group of every mini-batch (the fork filters one in four).
# Every selection is written to $OUT/rollouts/gmts_selection/, next to verl's own {step}.jsonl:
# open $OUT/rollouts in the Runs tab (or `gmts analyze-run $OUT/rollouts`).
set -euo pipefail
MODEL="${MODEL:-Qwen/Qwen3-8B}"
TRAIN="${TRAIN:-$HOME/data/math/train.parquet}"
TEST="${TEST:-$HOME/data/math/test.parquet}"
OUT="${OUT:-$PWD/outputs/qwen3_8b_gmts_paper_verl}"
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
    algorithm.use_kl_in_reward=False \
    algorithm.filter_groups.enable=False \
    data.train_files="$TRAIN" \
    data.val_files="$TEST" \
    data.train_batch_size=512 \
    data.max_prompt_length=1024 \
    data.max_response_length=4096 \
    data.filter_overlong_prompts=False \
    data.truncation=left \
    reward.reward_manager.name=dapo \
    actor_rollout_ref.model.path="$MODEL" \
    +actor_rollout_ref.model.override_config.attn_implementation="$ATTN" \
    actor_rollout_ref.model.use_remove_padding="$RMPAD" \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.use_dynamic_bsz=True \
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.kl_loss_coef=0.0 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.actor.policy_loss._target_=gmts_core.integrations.verl.GMTSPolicyLossConfig \
    actor_rollout_ref.actor.policy_loss.loss_mode=gmts_paper_verl \
    +actor_rollout_ref.actor.policy_loss.gmts_ratio=0.2 \
    +actor_rollout_ref.actor.policy_loss.gmts_scope=group \
    +actor_rollout_ref.actor.policy_loss.gmts_reselect=mini_batch \
    +actor_rollout_ref.actor.policy_loss.gmts_log_dir="$OUT/rollouts" \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    actor_rollout_ref.ref.fsdp_config.param_offload=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=4 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.n=16 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=False \
    actor_rollout_ref.rollout.val_kwargs.n=1 \
    trainer.logger='["console"]' \
    trainer.project_name=gmts \
    trainer.experiment_name=qwen3_8b_gmts_paper_verl \
    trainer.default_local_dir="$OUT/checkpoints" \
    trainer.rollout_data_dir="$OUT/rollouts" \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.save_freq=5 \
    trainer.test_freq=1 \
    trainer.val_before_train=True \
    trainer.total_epochs=1 "$@"
