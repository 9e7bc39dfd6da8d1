"""The examples/verl recipes compose with verl's own Hydra config (every key exists, the
``+`` keys are new) and resolve to the GMTS policy-loss config they mean."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from verl.utils.config import omega_conf_to_dataclass

from gmts_core.integrations import verl as plugin

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "examples" / "verl").glob("*.sh"))


def overrides(script: Path) -> list[str]:
    """The ``key=value`` lines of the main_ppo call, with the script's shell variables set."""
    text = script.read_text()
    defaults = dict(re.findall(r'^(\w+)="\$\{\w+:-([^}$]*)\}"$', text, re.M))  # VAR="${VAR:-x}"
    call = text[text.index("verl.trainer.main_ppo") :]
    out = []
    for line in call.splitlines()[1:]:
        line = line.strip().rstrip("\\").strip()
        if not line or line.startswith('"$@"') or "=" not in line:
            continue
        line = line.replace(' "$@"', "")
        line = re.sub(
            r'"?\$\{?(\w+)\}?([^"\s]*)"?',
            lambda m: defaults.get(m.group(1), f"/tmp/{m.group(1).lower()}") + m.group(2),
            line,
        )
        out.append(line.replace("'", ""))
    return out


@pytest.mark.parametrize("script", RECIPES, ids=lambda p: p.name)
def test_recipe_composes_with_verl_config(script: Path):
    assert len(RECIPES) == 2
    config_dir = str(Path(verl.__path__[0]) / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides(script))
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, plugin.GMTSPolicyLossConfig)
    settings = plugin.gmts_settings(actor.policy_loss)
    assert settings.ratio == 0.2 and settings.scope == "group"
    assert actor.use_dynamic_bsz and cfg.actor_rollout_ref.model.use_remove_padding
    assert actor.policy_loss.gmts_log_dir == cfg.trainer.rollout_data_dir
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    if "qwen3_8b" in script.name:  # the paper's Framework2 script's numbers
        assert settings.method == "gmts_paper_verl"
        assert cfg.data.train_batch_size == 512 and actor.ppo_mini_batch_size == 32
        assert cfg.actor_rollout_ref.rollout.n == 16 and actor.loss_agg_mode == "token-mean"
        assert cfg.data.max_response_length == 4096 and not actor.use_kl_loss
