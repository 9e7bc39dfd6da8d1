"""Task mixes of the demo task: the default mix is the task's own batches, hard-mix adds
zero-signal groups (measured with the bundled model), unknown names are refused."""

from __future__ import annotations

import dataclasses

import pytest

from gmts_core.demo import DEMO_MODEL_DIR
from gmts_core.errors import InvalidInputError
from gmts_core.experiments.compare import CompareConfig
from gmts_core.experiments.evaluation import demo_batch, evaluate_accuracy
from gmts_core.tasks.arith import generate_problems, split_of
from gmts_core.tasks.mixes import HARD_SHARE, mixed_prompts, task_mix_names


def test_the_default_mix_is_the_tasks_own_batches() -> None:
    batch = demo_batch(16, seed=5)
    problems = generate_problems(16, seed=5, split="train")
    assert [(p.prompt, p.reference) for p in batch] == [(p.prompt, p.reference) for p in problems]
    assert demo_batch(16, seed=5, mix="default") == batch


def test_hard_mix_is_seeded_half_three_digit_sums_of_the_split() -> None:
    first = mixed_prompts("hard-mix", 32, seed=3)
    assert first == mixed_prompts("hard-mix", 32, seed=3)
    assert first != mixed_prompts("hard-mix", 32, seed=4)
    hard = [p for p in first if p.hard]
    assert len(hard) == round(32 * HARD_SHARE) == 16
    for p in hard:
        a, b = _operands(p.prompt)
        assert 100 <= a <= 999 and 100 <= b <= 999 and p.reference == str(a + b)
        assert split_of(a, b, "+") == "train"
    heldout = [p for p in mixed_prompts("hard-mix", 8, seed=1, split="heldout") if p.hard]
    assert heldout and all(split_of(*_operands(p.prompt), "+") == "heldout" for p in heldout)
    assert len(mixed_prompts("hard-mix", 5, seed=0)) == 5


def _operands(prompt: str) -> tuple[int, int]:
    a, b = prompt.removeprefix("Q: ").removesuffix("=?\nA:").split("+")
    return int(a), int(b)


def test_an_unknown_mix_is_refused_with_the_valid_names() -> None:
    assert task_mix_names() == ["default", "hard-mix"]
    with pytest.raises(InvalidInputError, match="hard-mix"):
        mixed_prompts("easy", 4)
    with pytest.raises(InvalidInputError, match="unknown task mix 'easy'; valid: default, hard"):
        dataclasses.replace(CompareConfig(), task_mix="easy").validate()
    CompareConfig(task_mix="hard-mix").validate()


@pytest.mark.skipif(
    not (DEMO_MODEL_DIR / "config.json").is_file(), reason="the demo model is not trained yet"
)
def test_hard_mix_gives_the_base_model_many_more_zero_signal_groups() -> None:
    """Groups of G = 8 answers at T = 1 from the bundled model (the training rollouts'
    sampling): a group whose answers all score the same has no GRPO signal."""
    from gmts_core.model.loading import load_model

    lm = load_model(DEMO_MODEL_DIR, name="tiny-arith", device="cpu")

    def zero_signal_share(mix: str) -> float:
        batch = demo_batch(32, seed=11, mix=mix)
        scores = evaluate_accuracy(
            lm.model, lm.tokenizer, batch, samples_per_problem=8, seed=7
        ).per_problem
        return sum(s in (0.0, 1.0) for s in scores) / len(scores)

    default, hard = zero_signal_share("default"), zero_signal_share("hard-mix")
    assert default <= 0.2  # most two-digit problems: right about half the time
    assert hard >= HARD_SHARE  # every three-digit sum's group is all wrong
    assert hard - default >= 0.3
