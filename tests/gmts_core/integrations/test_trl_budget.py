"""GMTSGRPOTrainer's ``selection_budget_over``: with ``content`` the tokenizer's special tokens
among the completion tokens are never selected and take no share of k (a real tiny trainer, one
generated batch; a frequent completion token is registered as a special token of the
trainer's tokenizer, so the batch is sure to hold some)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gmts_core.integrations.trl import GMTSGRPOConfig
from gmts_core.methods.budget import special_ids, special_mask
from tests.gmts_core.integrations.test_trl import make_trainer, model_dir, one_batch

__all__ = ["model_dir"]  # the fixture, shared with test_trl.py


def test_content_budget_leaves_special_tokens_out(model_dir: Path, tmp_path: Path) -> None:
    config = GMTSGRPOConfig(
        output_dir=str(tmp_path),
        max_completion_length=16,
        num_generations=4,
        per_device_train_batch_size=4,
        max_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        seed=0,
        token_selection="entropy",
        selection_ratio=0.5,
        selection_budget_over="content",
    )
    trainer = make_trainer(model_dir, tmp_path, config=config)
    inputs = one_batch(trainer)
    valid = inputs["completion_mask"].bool()
    ids = inputs["completion_ids"][valid]
    tok = trainer.processing_class
    frequent = Counter(ids.tolist()).most_common(1)[0][0]
    tok.add_special_tokens({"additional_special_tokens": [tok.convert_ids_to_tokens(frequent)]})
    special = special_mask(ids, special_ids(tok))
    assert 0 < int(special.sum()) < ids.numel()
    for rule in ("content", "trained"):
        trainer.args.selection_budget_over = rule
        trainer.compute_loss(trainer.model, inputs)
        kept = trainer.last_selection.local_mask[valid]
        counted = ids.numel() - (int(special.sum()) if rule == "content" else 0)
        assert int(kept.sum()) == -(-counted // 2)  # ceil(0.5 * counted), one batch scope
        if rule == "content":
            assert not kept[special].any()
