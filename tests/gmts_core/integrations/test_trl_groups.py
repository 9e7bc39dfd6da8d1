"""GMTSGRPOTrainer selects per group (group ids from ``num_generations``) and per scope as the
API does, through real TRL steps on CPU; GMTSGRPOConfig is read by TrlParser from a YAML."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, TrlParser

from gmts_core.errors import InvalidInputError, UnknownNameError
from gmts_core.integrations.trl import GMTSGRPOConfig, GMTSGRPOTrainer
from gmts_core.integrations.trl_selection import generation_group_ids
from gmts_core.methods.selection import (
    SelectionInputs,
    default_scope,
    list_methods,
    select,
    top_k_count,
)
from tests.gmts_core.integrations.test_trl import model_dir  # noqa: F401  (the fixture)

# two prompts, two groups per generation batch; the first group's rewards are 100x the second's
PROMPTS = ["Q: 47+38=?\nA:", "Q: 23+14=?\nA:"]
SCALE = {PROMPTS[0]: 100.0, PROMPTS[1]: 1.0}


def scaled_reward(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
    return [
        SCALE[p] * float(sum(map(ord, c)) % 5) for p, c in zip(prompts, completions, strict=True)
    ]


def config(out: Path, cls: type = GMTSGRPOConfig, **overrides: Any) -> Any:
    settings: dict[str, Any] = dict(
        output_dir=str(out),
        max_completion_length=12,
        num_generations=4,
        per_device_train_batch_size=8,  # one micro-batch = both groups
        max_steps=1,
        learning_rate=1e-2,
        report_to="none",
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16=True even on CPU: float32 set explicitly
        fp16=False,
        scale_rewards="none",  # advantages r - mean r: the two groups' scales stay 100x apart
        gradient_checkpointing=False,
        save_strategy="no",
        logging_steps=1,
        temperature=2.0,  # varied completions, so both groups have a learning signal
        seed=0,
    )
    settings.update(overrides)
    return cls(**settings)


class Recording(GMTSGRPOTrainer):
    """Keeps the last micro-batch it computed a loss on."""

    seen: dict[str, Any] | None = None

    def _compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        self.seen = inputs
        return super()._compute_loss(model, inputs)


def make(folder: Path, args: Any, **kwargs: Any) -> Recording:
    return Recording(
        model=str(folder),
        reward_funcs=scaled_reward,
        args=args,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        **kwargs,
    )


def prompt_groups(trainer: Recording, inputs: dict[str, Any]) -> torch.Tensor:
    """Each valid token's group, from its row's prompt text: independent of the trainer's ids."""
    texts = trainer.processing_class.batch_decode(inputs["prompt_ids"], skip_special_tokens=True)
    row_group = torch.tensor([0 if "47+38" in t else 1 for t in texts])
    valid = inputs["completion_mask"].bool()
    return row_group[valid.nonzero()[:, 0]]


def with_groups(x: SelectionInputs, groups: torch.Tensor) -> SelectionInputs:
    return SelectionInputs(**{**x.__dict__, "group_index": groups})


def test_a_real_step_selects_within_each_group(model_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    ratio = 0.25
    trainer = make(
        model_dir,
        config(tmp_path, token_selection="gmts", selection_ratio=ratio, selection_scope="group"),
    )
    trainer.train()
    applied, inputs = trainer.last_selection, trainer.seen
    assert applied is not None and inputs is not None
    groups = prompt_groups(trainer, inputs)
    adv = applied.inputs.advantage
    assert adv is not None
    scale = [float(adv[groups == g].abs().max()) for g in (0, 1)]
    assert scale[1] > 0 and scale[0] >= 20 * scale[1], scale  # ~100x apart
    x = with_groups(applied.inputs, groups)
    valid = inputs["completion_mask"].bool()
    expected = select(x, "gmts", ratio, "group").selected
    assert torch.equal(applied.local_mask[valid], expected)
    for g in (0, 1):  # each group keeps its own ceil(ratio * N_g)
        n_g = int((groups == g).sum())
        assert int(expected[groups == g].sum()) == top_k_count(ratio, n_g)
    # the batch-wide top-k would be a different selection: the scales differ 100x
    assert not torch.equal(expected, select(x, "gmts", ratio, "batch").selected)


def test_every_method_honours_its_default_scope(model_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    trainer = make(model_dir, config(tmp_path, selection_ratio=0.3))
    trainer.train()  # one real step, then every method on that step's micro-batch
    inputs = trainer.seen
    assert inputs is not None
    valid = inputs["completion_mask"].bool()
    groups = prompt_groups(trainer, inputs)
    trainer.model.eval()
    for method in list_methods():
        trainer.token_selection = method
        trainer.compute_loss(trainer.model, inputs)
        applied = trainer.last_selection
        assert applied is not None
        scope = default_scope([method])
        assert trainer.scope == scope
        x = with_groups(applied.inputs, groups)
        expected = select(x, method, 0.3, scope).selected
        assert torch.equal(applied.local_mask[valid], expected), method
    assert default_scope(["gmts_paper"]) == default_scope(["gmts_paper_verl"]) == "group"


def test_group_ids_span_processes() -> None:
    # G = 4, 6 rows per process: rows 6..11 of process 1 are groups 1, 1, 2, 2, 2, 2
    assert generation_group_ids(6, 1, 4).tolist() == [1, 1, 2, 2, 2, 2]
    assert generation_group_ids(8, 0, 4).tolist() == [0] * 4 + [1] * 4


RECIPE = """\
output_dir: {out}
token_selection: gmts_paper
selection_ratio: 0.3
selection_scope: group
log_selection: true
num_generations: 4
per_device_train_batch_size: 8
use_cpu: true
bf16: false
report_to: none
"""


def test_trl_parser_reads_a_yaml_recipe(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(out=tmp_path / "out"))
    (cfg,) = TrlParser((GMTSGRPOConfig,)).parse_args_and_config(args=["--config", str(recipe)])
    assert isinstance(cfg, GMTSGRPOConfig) and isinstance(cfg, GRPOConfig)
    assert (cfg.token_selection, cfg.selection_ratio) == ("gmts_paper", 0.3)
    assert cfg.selection_scope == "group" and cfg.log_selection is True
    assert cfg.bf16 is False and cfg.num_generations == 4
    # the command line overrides the recipe; a bad name fails listing the valid ones
    (cfg,) = TrlParser((GMTSGRPOConfig,)).parse_args_and_config(
        args=["--config", str(recipe), "--selection_ratio", "0.5"]
    )
    assert cfg.selection_ratio == 0.5 and cfg.resolved_scope() == "group"
    with pytest.raises(UnknownNameError, match="gmts_paper_verl"):
        GMTSGRPOConfig(output_dir=str(tmp_path), token_selection="nope", use_cpu=True)
    with pytest.raises(InvalidInputError, match="scope"):
        GMTSGRPOConfig(output_dir=str(tmp_path), selection_scope="prompt", use_cpu=True)


def test_trainer_takes_the_config_and_keyword_overrides(
    model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    trainer = make(model_dir, config(tmp_path, token_selection="gmts_paper", selection_ratio=0.4))
    assert (trainer.token_selection, trainer.selection_ratio, trainer.scope) == (
        "gmts_paper",
        0.4,
        "group",
    )
    plain = make(model_dir, config(tmp_path, cls=GRPOConfig), token_selection="entropy")
    assert (plain.token_selection, plain.selection_ratio, plain.scope) == ("entropy", 0.2, "batch")


# --- several processes: a group split between two processes is one group ---------------------

REPO = Path(__file__).resolve().parents[3]
SPLIT_SCRIPT = """
import json, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from datasets import Dataset
from tests.gmts_core.integrations.test_trl_groups import Recording, config, scaled_reward
cfg = config(Path({out!r}), per_device_train_batch_size=6, selection_scope="group",
             token_selection="gmts", selection_ratio=0.3, scale_rewards="group")
prompts = ["Q: 47+38=?\\nA:", "Q: 23+14=?\\nA:", "Q: 52+37=?\\nA:"]
trainer = Recording(model={model!r}, reward_funcs=lambda completions, **_: [
    float(sum(map(ord, c)) % 5) for c in completions], args=cfg,
    train_dataset=Dataset.from_list([{{"prompt": p}} for p in prompts]))
trainer.train()
a = trainer.last_selection
seen = trainer.seen
texts = trainer.processing_class.batch_decode(seen["prompt_ids"], skip_special_tokens=True)
rows = seen["completion_mask"].bool().nonzero()[:, 0].tolist()
json.dump({{"groups": a.inputs.group_index.tolist(), "prompts": [texts[r] for r in rows],
    "selected": a.selection.selected.tolist(),
    "rank": trainer.accelerator.process_index, "offset": a.offset, "local": a.num_local}},
    open(Path({out!r}) / f"rank{{trainer.accelerator.process_index}}.json", "w"))
"""


@pytest.mark.slow
def test_a_group_split_between_processes_is_selected_as_one(
    model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """12 completions of 3 prompts (G = 4) on 2 processes of 6 rows: the middle group has two
    rows on each process. Both processes see the same gathered group ids (global row // G) and
    keep ceil(0.3 N_g) tokens of each group, the split one included."""
    from tests.multiprocess import torchrun

    script = tmp_path / "run.py"
    script.write_text(SPLIT_SCRIPT.format(repo=str(REPO), model=str(model_dir), out=str(tmp_path)))
    torchrun(script, cwd=REPO)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["groups"] == ranks[1]["groups"]
    groups = torch.tensor(ranks[0]["groups"])
    # each process's tokens: (group id, prompt) pairs; one prompt per group id, and back
    pairs = set()
    for r in ranks:
        local = r["groups"][r["offset"] : r["offset"] + r["local"]]
        pairs |= set(zip(local, r["prompts"], strict=True))
    assert len(pairs) == len({g for g, _ in pairs}) == len({p for _, p in pairs}) == 3
    selected = torch.tensor(ranks[0]["selected"])
    local0 = groups[: ranks[0]["local"]]
    local1 = groups[ranks[1]["offset"] :]
    assert set(local0.tolist()) & set(local1.tolist()), "one group should span both processes"
    for g in torch.unique(groups):
        n_g = int((groups == g).sum())
        assert int(selected[groups == g].sum()) == top_k_count(0.3, n_g)
