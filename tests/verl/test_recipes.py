"""The examples/verl recipes and scripts/gpu_check_verl.sh compose with verl's own Hydra config
(every key exists, the ``+`` keys are new), resolve to the GMTS policy-loss config they mean,
pass verl's own ``validate_config``, and choose an attention implementation that loads without
flash-attn (sdpa on padded batches) or with it (flash_attention_2 with sequence packing)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from gmts_core.integrations import verl as plugin
from gmts_core.integrations import verl_selection

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "examples" / "verl").glob("*.sh"))
GPU_CHECK = ROOT / "scripts" / "gpu_check_verl.sh"
ATTENTION = {"sdpa": "False", "flash_attention_2": "True"}  # ATTN -> use_remove_padding


def _lines(text: str, env: dict[str, str]) -> list[str]:
    """``key=value`` lines of a shell command, with the shell variables of ``env`` set."""
    out = []
    for line in text.splitlines():
        line = line.strip().rstrip("\\").strip()
        if not line or line.startswith('"$@"') or "=" not in line:
            continue
        line = line.replace(' "$@"', "")
        line = re.sub(
            r'"?\$\{?(\w+)\}?([^"\s]*)"?',
            lambda m: env.get(m.group(1), f"/tmp/{m.group(1).lower()}") + m.group(2),
            line,
        )
        out.extend(line.replace("'", "").split())
    return out


def overrides(script: Path, env: dict[str, str] | None = None) -> list[str]:
    """The ``key=value`` lines of the main_ppo call, with the script's shell variables set."""
    text = script.read_text()
    defaults = dict(re.findall(r'^(\w+)="\$\{\w+:-([^}$]*)\}"$', text, re.M))  # VAR="${VAR:-x}"
    call = text[text.index("verl.trainer.main_ppo") :]
    return _lines("\n".join(call.splitlines()[1:]), {**defaults, **(env or {})})


def gpu_check_overrides(env: dict[str, str]) -> list[str]:
    """The small recipe's lines plus the ones scripts/gpu_check_verl.sh appends."""
    text = GPU_CHECK.read_text()
    start = text.index("bash examples/verl/run_small_one_gpu.sh")
    extra = text[start : text.index('> "$DIR/train.log"', start)].splitlines()[1:]
    extra = [x for x in extra if "=" in x]
    recipe = ROOT / "examples" / "verl" / "run_small_one_gpu.sh"
    return overrides(recipe, env) + _lines("\n".join(extra), {"STEPS": "3", **env})


def _compose(lines: list[str]):
    config_dir = str(Path(verl.__path__[0]) / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=lines)


def _env(attention: str) -> dict[str, str]:
    return {"ATTN": attention, "RMPAD": ATTENTION[attention]}


@pytest.mark.parametrize("attention", list(ATTENTION))
@pytest.mark.parametrize("script", RECIPES, ids=lambda p: p.name)
def test_recipe_composes_with_verl_config(script: Path, attention: str):
    assert len(RECIPES) == 2
    cfg = _compose(overrides(script, _env(attention)))
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, plugin.GMTSPolicyLossConfig)
    settings = verl_selection.gmts_settings(actor.policy_loss)
    assert settings.ratio == 0.2 and settings.scope == "group"
    model = cfg.actor_rollout_ref.model
    assert model.override_config.attn_implementation == attention
    assert model.use_remove_padding == (attention == "flash_attention_2")  # packing needs FA2
    assert actor.use_dynamic_bsz
    assert actor.policy_loss.gmts_log_dir == cfg.trainer.rollout_data_dir
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    validate_config(cfg, need_reference_policy(cfg), need_critic(cfg))  # verl's own checks
    if "qwen3_8b" in script.name:  # the paper's Framework2 script's numbers
        assert settings.method == "gmts_paper_verl"
        assert cfg.data.train_batch_size == 512 and actor.ppo_mini_batch_size == 32
        assert cfg.actor_rollout_ref.rollout.n == 16 and actor.loss_agg_mode == "token-mean"
        assert cfg.data.max_response_length == 4096 and not actor.use_kl_loss


@pytest.mark.parametrize("attention", list(ATTENTION))
def test_gpu_check_composes_with_verl_config(attention: str):
    cfg = _compose(gpu_check_overrides(_env(attention)))
    assert cfg.trainer.total_training_steps == 3
    assert cfg.reward.custom_reward_function.name == "compute_score"
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == attention
    validate_config(cfg, need_reference_policy(cfg), need_critic(cfg))


@pytest.mark.parametrize("flash_attn", [True, False])
@pytest.mark.parametrize("script", [*RECIPES, GPU_CHECK], ids=lambda p: p.name)
def test_attention_follows_flash_attn(tmp_path: Path, script: Path, flash_attn: bool):
    """The scripts' own shell lines pick flash_attention_2 only where flash-attn imports."""
    text = script.read_text()
    lines = text[text.index('if [ -z "${ATTN:-}" ]; then') :].splitlines()
    end = next(i for i, x in enumerate(lines) if not x.startswith(("if ", "    ", "fi")))
    block = "\n".join(lines[:end])  # the if-blocks that set ATTN (and RMPAD)
    python = tmp_path / "python3"  # a python3 whose `import flash_attn` succeeds or fails
    python.write_text(f"#!/bin/sh\nexit {0 if flash_attn else 1}\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PY": str(python)}
    env.pop("ATTN", None)
    shown = subprocess.run(
        ["bash", "-c", block + '\necho "$ATTN ${RMPAD:-}"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    expected = "flash_attention_2" if flash_attn else "sdpa"
    assert shown[0] == expected
    if script in RECIPES:
        assert shown[1] == ATTENTION[expected]


def test_gmts_settings_are_refused_when_verl_validates_the_config():
    lines = overrides(RECIPES[-1], _env("sdpa"))
    bad = [*lines, "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"]
    with pytest.raises(Exception, match="loss_scale_factor"):
        cfg = _compose(bad)
        validate_config(cfg, need_reference_policy(cfg), need_critic(cfg))
    ok = [*bad, "actor_rollout_ref.actor.loss_scale_factor=256"]
    cfg = _compose(ok)
    validate_config(cfg, need_reference_policy(cfg), need_critic(cfg))
    bad_ratio = [x for x in lines if "gmts_ratio" not in x] + [
        "+actor_rollout_ref.actor.policy_loss.gmts_ratio=1.5"
    ]
    with pytest.raises(Exception, match="gmts_ratio"):
        cfg = _compose(bad_ratio)
        validate_config(cfg, need_reference_policy(cfg), need_critic(cfg))
