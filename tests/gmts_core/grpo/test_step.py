"""The GRPO step: its gradient against a hand-written loss, the mask, KL, clipping, seeds."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import pytest
import torch

from gmts_core.config import RLConfig
from gmts_core.experiments.evaluation import evaluate_accuracy
from gmts_core.grpo.forward import collect_while_sampling, micro_batches, padded_tokens
from gmts_core.grpo.loss import grpo_loss, k3_kl
from gmts_core.grpo.policy import PolicySettings, TrainablePolicy
from gmts_core.grpo.records import StepMetrics
from gmts_core.grpo.rollout import RLPrompt
from gmts_core.grpo.step import grpo_step
from gmts_core.grpo.update import make_optimizer, policy_update
from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.sampling.answers import SamplingConfig, sample_answers
from gmts_core.stats.forward import answer_token_stats
from tests.tiny_models import save_tiny_model

# regex rewards give a random tiny model mixed rewards, so advantages are not all zero
PROMPTS = [
    RLPrompt("The answer is", "[aeiou]", "regex"),
    RLPrompt("Q: 47+38=?", "[0-9]", "regex"),
]
CONFIG = RLConfig(group_size=4, max_new_tokens=8, max_grad_norm=1e9)


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(save_tiny_model(tmp_path_factory.mktemp("rl") / "llama"), device="cpu")


def _hand_loss(model: torch.nn.Module, result_batch, temperature: float) -> torch.Tensor:
    """-sum_t w_i A_i m_t log pi(y_t) from full-sequence logits, one answer at a time."""
    total = torch.zeros(())
    flat = 0
    for prompt_ids, answer_ids in result_batch.sequences:
        ids = torch.tensor([prompt_ids + answer_ids])
        logits = model(input_ids=ids).logits[0]  # (T, V)
        start = len(prompt_ids) - 1  # position t predicts token t + 1
        for j, tok in enumerate(answer_ids):
            logp = torch.log_softmax(logits[start + j] / temperature, dim=-1)[tok]
            k = flat + j
            if result_batch.mask[k]:
                w, a = float(result_batch.weights[k]), float(result_batch.advantages[k])
                total = total - w * a * logp
        flat += len(answer_ids)
    return total


def test_step_gradient_equals_hand_written_loss(lm: LoadedModel) -> None:
    policy = TrainablePolicy(lm, PolicySettings(kind="full"))
    config = dataclasses.replace(CONFIG, learning_rate=0.0, temperature=0.9)
    step = grpo_step(policy, make_optimizer(policy, config), PROMPTS, config, seed=3)
    assert step.batch.advantages.abs().sum() > 0, "the batch must carry a learning signal"
    assert 0 < int(step.batch.mask.sum()) < step.batch.num_tokens
    hand = copy.deepcopy(lm.model).requires_grad_(True)
    _hand_loss(hand, step.batch, config.temperature).backward()
    expected = dict(hand.named_parameters())
    for name, param in policy.model.named_parameters():
        assert param.grad is not None, name
        torch.testing.assert_close(param.grad, expected[name].grad, rtol=1e-4, atol=1e-7)


def test_unselected_tokens_contribute_exactly_zero_gradient(lm: LoadedModel) -> None:
    config = dataclasses.replace(CONFIG, learning_rate=0.0)
    grads = []
    for unselected_advantage in (None, 1000.0):
        policy = TrainablePolicy(lm, PolicySettings(kind="full"))
        step = grpo_step(policy, make_optimizer(policy, config), PROMPTS, config, seed=5)
        batch = step.batch
        if unselected_advantage is not None:  # same batch, wild advantages outside the mask
            batch.advantages = torch.where(batch.mask, batch.advantages, unselected_advantage)
            policy_update(policy, make_optimizer(policy, config), batch, config)
        grads.append([p.grad.clone() for p in policy.trainable_parameters()])
    for g0, g1 in zip(*grads, strict=True):
        assert torch.equal(g0, g1)


def _naive_loss(logp, old, adv, w, mask, lo, hi):
    total = torch.zeros((), dtype=logp.dtype)
    for t in range(logp.numel()):
        ratio = torch.exp(logp[t] - old[t])
        term = torch.minimum(ratio * adv[t], torch.clamp(ratio, 1 - lo, 1 + hi) * adv[t])
        total = total - w[t] * mask[t] * term
    return total


def test_grpo_loss_matches_naive_formula_with_clipping() -> None:
    gen = torch.Generator().manual_seed(0)
    n = 40
    logp = (-torch.rand(n, generator=gen, dtype=torch.float64) * 3).requires_grad_(True)
    old = logp.detach() + 0.4 * torch.randn(n, generator=gen, dtype=torch.float64)
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    w = torch.full((n,), 1.0 / n, dtype=torch.float64)
    mask = torch.rand(n, generator=gen) < 0.5
    terms = grpo_loss(logp, old, adv, w, mask, 0.2, 0.28)
    (got,) = torch.autograd.grad(terms.loss, logp)
    naive = _naive_loss(logp, old, adv, w, mask.double(), 0.2, 0.28)
    (want,) = torch.autograd.grad(naive, logp)
    torch.testing.assert_close(terms.loss.detach(), naive.detach())
    torch.testing.assert_close(got, want)
    assert (got[~mask] == 0).all()
    ratio = torch.exp(logp.detach() - old)
    low = ((ratio < 0.8) & (adv < 0) & mask).sum() / mask.sum()
    high = ((ratio > 1.28) & (adv > 0) & mask).sum() / mask.sum()
    assert terms.clip_low_fraction == pytest.approx(float(low))
    assert terms.clip_high_fraction == pytest.approx(float(high))
    assert terms.clip_low_fraction + terms.clip_high_fraction > 0  # clipping was exercised


def test_k3_kl_formula() -> None:
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.0, -1.0, -3.0])
    d = ref - logp
    torch.testing.assert_close(k3_kl(logp, ref), torch.exp(d) - d - 1)
    assert k3_kl(logp, ref)[0] == 0 and (k3_kl(logp, ref)[1:] > 0).all()


def test_kl_is_zero_before_the_first_update_and_grows_after(lm: LoadedModel) -> None:
    config = dataclasses.replace(CONFIG, beta=0.1, learning_rate=1e-2)
    policy = TrainablePolicy(lm, PolicySettings(kind="full"))
    opt = make_optimizer(policy, config)
    first = grpo_step(policy, opt, PROMPTS, config, seed=1).metrics
    second = grpo_step(policy, opt, PROMPTS, config, seed=2).metrics
    assert first.kl == 0.0
    assert second.kl > 0.0


def test_ratio_is_one_at_the_first_inner_update(lm: LoadedModel) -> None:
    config = dataclasses.replace(CONFIG, learning_rate=5e-2, inner_steps=3, epsilon_high=0.01)
    policy = TrainablePolicy(lm, PolicySettings(kind="full"))
    step = grpo_step(policy, make_optimizer(policy, config), PROMPTS, config, seed=1)
    policy2 = TrainablePolicy(lm, PolicySettings(kind="full"))
    update = policy_update(policy2, make_optimizer(policy2, config), step.batch, config)
    rows = update.per_inner_step
    assert rows[0]["clip_low_fraction"] == 0.0 and rows[0]["clip_high_fraction"] == 0.0
    assert rows[0]["kl"] == 0.0
    assert any(r["clip_low_fraction"] + r["clip_high_fraction"] > 0 for r in rows[1:])


def metrics_without_time(m: StepMetrics) -> dict[str, Any]:
    """A step's metrics as plain values (NaN as None, so equal runs compare equal), no timing."""
    plain = dataclasses.asdict(dataclasses.replace(m, seconds=0.0))
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in plain.items()}


def test_same_seed_gives_same_metrics(lm: LoadedModel) -> None:
    runs = []
    for _ in range(2):
        policy = TrainablePolicy(lm, PolicySettings(kind="full"))
        opt = make_optimizer(policy, CONFIG)
        runs.append(
            [
                metrics_without_time(grpo_step(policy, opt, PROMPTS, CONFIG, seed=s).metrics)
                for s in (7, 8)
            ]
        )
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]


def test_step_reports_wasted_share_and_token_changes(lm: LoadedModel) -> None:
    config = dataclasses.replace(
        CONFIG, method="entropy", report_methods=("gmts", "random"), measure_logprob_after=True
    )
    policy = TrainablePolicy(lm, PolicySettings(kind="full"))
    step = grpo_step(policy, make_optimizer(policy, config), PROMPTS, config, seed=3)
    assert len({a.reward for a in step.answers}) > 1  # a seed whose batch has a signal
    m = step.metrics
    assert set(m.wasted_share) == {"entropy", "gmts", "random"}
    assert m.selected_fraction == pytest.approx(int(step.batch.mask.sum()) / m.num_tokens)
    tokens = [t for a in step.answers for t in a.tokens]
    assert len(tokens) == m.num_tokens
    assert [t.selected for t in tokens] == step.batch.mask.tolist()
    moved = [t.logprob_after != t.logprob_before for t in tokens]
    assert any(moved)
    first = step.answers[0].tokens[0]
    assert first.logprob_change == first.logprob_after - first.logprob_before


def _after_by_hand(model: torch.nn.Module, sequences, temperature: float) -> list[float]:
    """log pi(y_t) of every answer token, one answer at a time through the model's own
    forward (no shared prompts, no padding): the reference for the log-prob-after pass."""
    out = []
    with torch.no_grad():
        for prompt_ids, answer_ids in sequences:
            logits = model(input_ids=torch.tensor([prompt_ids + answer_ids])).logits[0]
            start = len(prompt_ids) - 1  # position t predicts token t + 1
            for j, tok in enumerate(answer_ids):
                out.append(float(torch.log_softmax(logits[start + j] / temperature, -1)[tok]))
    return out


def test_logprob_after_on_the_first_prompts_equals_the_whole_batch_pass(lm: LoadedModel) -> None:
    """``logprob_after_prompts`` (the Train tab's: the prompts it draws) measures the pass
    after the update on those prompts' answers only: on their tokens it gives what the pass over
    the whole batch gives (to float32 rounding: the forward's shapes differ; 5e-7 seen), and the
    model's own forward by hand; the other tokens are not
    measured (None), the Δlog p means cover the measured tokens, and the training is the same."""
    prompts = [*PROMPTS, RLPrompt("Hello", "[aeiou]", "regex")]
    steps, params = {}, {}
    for shown in (0, 1, 2):
        config = dataclasses.replace(
            CONFIG, measure_logprob_after=True, logprob_after_prompts=shown, temperature=0.9
        )
        policy = TrainablePolicy(lm, PolicySettings(kind="full"))
        steps[shown] = grpo_step(policy, make_optimizer(policy, config), prompts, config, seed=3)
        params[shown] = [p.detach().clone() for p in policy.trainable_parameters()]
        if shown == 1:
            trained = policy.model
    full = steps[0]
    assert full.logprob_after is not None and not full.logprob_after.isnan().any()
    groups = full.batch.group_index
    assert groups is not None and len(set(groups.tolist())) == 3
    for shown in (1, 2):
        assert all(torch.equal(a, b) for a, b in zip(params[0], params[shown], strict=True))
        step = steps[shown]
        assert torch.equal(step.logprob_before, full.logprob_before)
        rows = groups < shown  # the first ``shown`` groups' tokens: a prefix of the batch
        after = step.logprob_after
        assert after is not None and 0 < int(rows.sum()) < len(rows)
        assert torch.equal(after.isnan(), ~rows)
        torch.testing.assert_close(after[rows], full.logprob_after[rows], rtol=0, atol=1e-6)
        m, delta = step.metrics, (full.logprob_after - full.logprob_before).double()
        for got, keep in (
            (m.selected_logprob_change, rows & full.batch.mask),
            (m.unselected_logprob_change, rows & ~full.batch.mask),
        ):
            assert got == pytest.approx(float(delta[keep].mean()), abs=1e-6, nan_ok=True)
        for answer in step.answers:
            for token in answer.tokens:
                assert (token.logprob_after is None) == (answer.group >= shown)
    # the measured rows against the model's own forward, one answer at a time
    one = steps[1]
    n = int((groups < 1).sum())
    answers = int(one.batch.answer_index[n])
    by_hand = _after_by_hand(trained, one.batch.sequences[:answers], 0.9)
    assert one.logprob_after is not None
    torch.testing.assert_close(
        one.logprob_after[:n].double(),
        torch.tensor(by_hand, dtype=torch.float64),
        rtol=0,
        atol=1e-5,
    )


def test_batched_evaluation_equals_one_prompt_at_a_time(lm: LoadedModel) -> None:
    problems = PROMPTS + [RLPrompt("Hello", "[aeiou]", "regex")]
    got = evaluate_accuracy(
        lm.model, lm.tokenizer, problems, temperature=0, max_new_tokens=6, reward_kind="regex"
    )
    from gmts_core.methods.rewards import compute_reward
    from gmts_core.stats.tokenization import encode_prompt

    expected = []
    for p in problems:
        ids = encode_prompt(lm.tokenizer, p.prompt, False)
        (ans,) = sample_answers(lm.model, lm.tokenizer, ids, SamplingConfig(1, 0, max_new_tokens=6))
        text = lm.tokenizer.decode(ans.token_ids, skip_special_tokens=True)
        expected.append(compute_reward("regex", text, p.reference).reward)
    assert got.per_problem == expected
    assert got.accuracy == pytest.approx(sum(expected) / len(expected))


def test_micro_batches_accumulate_the_same_gradient(lm: LoadedModel) -> None:
    config = dataclasses.replace(CONFIG, learning_rate=0.0, beta=0.1)
    grads, metrics = [], []
    for max_tokens in (100_000, 1):  # one forward for the batch / one per answer
        policy = TrainablePolicy(lm, PolicySettings(kind="full"))
        cfg = dataclasses.replace(config, max_batch_tokens=max_tokens)
        step = grpo_step(policy, make_optimizer(policy, cfg), PROMPTS, cfg, seed=3)
        grads.append([p.grad.clone() for p in policy.trainable_parameters()])
        metrics.append(step.metrics)
    for g0, g1 in zip(*grads, strict=True):
        torch.testing.assert_close(g0, g1, rtol=1e-4, atol=1e-7)
    assert metrics[0].loss == pytest.approx(metrics[1].loss, rel=1e-4, abs=1e-7)
    assert metrics[0].selected_fraction == metrics[1].selected_fraction


def test_logprob_after_is_not_measured_unless_asked(lm: LoadedModel) -> None:
    policy = TrainablePolicy(lm, PolicySettings(kind="full"))
    step = grpo_step(policy, make_optimizer(policy, CONFIG), PROMPTS, CONFIG, seed=2)
    token = step.answers[0].tokens[0]
    assert token.logprob_after is None and token.logprob_change is None
    assert math.isfinite(token.logprob_before)
    assert math.isnan(step.metrics.selected_logprob_change)  # JSON null in the API's response


def _statistics(result) -> dict[str, torch.Tensor]:
    tokens = [t for _, a in result.iter_answers() for t in a.tokens]
    return {
        name: torch.tensor([getattr(t, name) for t in tokens], dtype=torch.float64)
        for name in ("logprob", "entropy", "grad_norm", "grad_proxy")
    }


def test_fused_statistics_equal_a_separate_pass_and_give_the_same_gradient(
    lm: LoadedModel,
) -> None:
    """Statistics from the training forward (fused) = those collected while sampling
    (``fused_max_tokens=0``: the answers alone could exceed it) = those of a separate no-grad
    pass (a budget the answers alone stay within but the padded batch exceeds, so nothing was
    collected) = a plain ``answer_token_stats``; same mask, same gradient."""
    config = dataclasses.replace(CONFIG, learning_rate=0.0, temperature=0.8, max_batch_tokens=40)
    answers_at_most = len(PROMPTS) * config.group_size * config.max_new_tokens
    steps, grads = [], []
    for fused_max in (100_000, 0, answers_at_most):
        policy = TrainablePolicy(lm, PolicySettings(kind="full"))
        cfg = dataclasses.replace(config, fused_max_tokens=fused_max)
        assert collect_while_sampling(cfg, len(PROMPTS)) == (fused_max == 0)
        steps.append(grpo_step(policy, make_optimizer(policy, cfg), PROMPTS, cfg, seed=4))
        grads.append([p.grad.clone() for p in policy.trainable_parameters()])
    fused, *others = steps
    parts = micro_batches(fused.batch.sequences, 40)
    assert len(parts) > 1  # several held graphs
    assert padded_tokens(fused.batch.sequences, parts) > answers_at_most  # the no-grad pass
    for separate in others:
        assert fused.batch.sequences == separate.batch.sequences
        assert torch.equal(fused.batch.mask, separate.batch.mask)
    plain = answer_token_stats(lm.model, fused.batch.sequences, lm.tokenizer.pad_token_id, 0.8)
    want = {
        "logprob": torch.cat([s.stats.logprob for s in plain]).double(),
        "entropy": torch.cat([s.stats.entropy for s in plain]).double(),
        "grad_norm": torch.cat([s.stats.grad_norm for s in plain]).double(),
    }
    got_fused = _statistics(fused.analysis)
    for step, step_grads in zip(steps, grads, strict=True):
        got = _statistics(step.analysis)
        for name, value in want.items():
            torch.testing.assert_close(got[name], value, rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(got_fused["grad_proxy"], got["grad_proxy"])
        for g0, g1 in zip(grads[0], step_grads, strict=True):
            torch.testing.assert_close(g0, g1, rtol=1e-5, atol=1e-8)
        assert fused.metrics.loss == pytest.approx(step.metrics.loss, rel=1e-5, abs=1e-8)


def test_fused_step_keeps_the_exact_records_with_kl_and_reselect(lm: LoadedModel) -> None:
    """With beta > 0 (KL in omega), re-selection and two inner updates, the fused first update
    gives the per-token records (ratio, clipped, coef) and the trained masks of the separate
    pass, at a second step where the policy has left its reference."""
    config = dataclasses.replace(
        CONFIG, beta=0.5, reselect=True, inner_steps=2, learning_rate=1e-3, max_batch_tokens=40
    )
    runs = []
    for fused_max in (100_000, 0):
        policy = TrainablePolicy(lm, PolicySettings(kind="full"))
        cfg = dataclasses.replace(config, fused_max_tokens=fused_max)
        opt = make_optimizer(policy, cfg)
        runs.append([grpo_step(policy, opt, PROMPTS, cfg, seed=s, step=s) for s in (1, 2)])
    fused, separate = runs[0][1], runs[1][1]
    tokens = [
        [t for _, a in r.analysis.iter_answers() for t in a.tokens] for r in (fused, separate)
    ]
    coef = [torch.tensor([t.coef for t in ts], dtype=torch.float64) for ts in tokens]
    adv = torch.tensor(
        [a.advantage for _, a in separate.analysis.iter_answers() for _ in a.tokens],
        dtype=torch.float64,
    )
    assert (coef[1] - adv).abs().max() > 1e-6  # r = 1: omega = A + beta (pi_ref / pi - 1)
    # the separate pass takes its statistics through the vocabulary-tiled head path, the fused
    # one from the training forward's logits: equal to float32 rounding (one ulp of log pi),
    # which the KL term's pi_ref / pi and one update amplify to a few 1e-7
    torch.testing.assert_close(coef[0], coef[1], rtol=1e-5, atol=1e-6)
    assert [t.ratio for t in tokens[0]] == [t.ratio for t in tokens[1]] == [1.0] * len(tokens[0])
    assert [t.clipped for t in tokens[0]] == [t.clipped for t in tokens[1]]
    assert torch.equal(fused.batch.mask, separate.batch.mask)
    assert fused.metrics.kl > 0
    assert fused.metrics.loss == pytest.approx(separate.metrics.loss, rel=1e-4, abs=1e-7)


def test_step_stages_are_announced_in_order(lm: LoadedModel) -> None:
    """Each stage of a step is announced as it begins: rollout, rewards, the statistics
    forward, selection, one "update" per inner update, then the log-prob-after pass."""
    config = dataclasses.replace(CONFIG, inner_steps=2, measure_logprob_after=True)
    policy = TrainablePolicy(lm, PolicySettings(kind="full"))
    heard: list[tuple[str, int, int]] = []
    grpo_step(
        policy,
        make_optimizer(policy, config),
        PROMPTS,
        config,
        seed=3,
        on_stage=lambda *a: heard.append(a),
    )
    names = ["generating answers", "scoring rewards", "token statistics", "selection"]
    names += ["update", "update", "log-prob after"]
    assert heard == [(n, i, len(names)) for i, n in enumerate(names)]


def test_step_builds_no_token_records_and_trains_on_their_flags(lm: LoadedModel) -> None:
    """The step trains from the analysis's flat tensors; the per-token records (and the
    per-token changes) are built only when read, and then agree with the batch it trained on."""
    config = dataclasses.replace(CONFIG, method="gmts", ratio=0.3)
    policy = TrainablePolicy(lm, PolicySettings(kind="full"))
    step = grpo_step(policy, make_optimizer(policy, config), PROMPTS, config, seed=3)
    answers = [a for _, a in step.analysis.iter_answers()]
    assert not any(a.tokens.built for a in answers)  # type: ignore[attr-defined]
    assert "answers" not in vars(step)  # the per-token changes are not built either
    assert sum(a.length for a in answers) == step.batch.num_tokens
    flags = [t.selected["gmts"] for a in answers for t in a.tokens]
    assert all(a.tokens.built for a in answers)  # type: ignore[attr-defined]
    assert flags == step.batch.mask.tolist()
    adv = [a.advantage for a in answers for _ in a.tokens]
    assert step.batch.advantages.tolist() == adv
    assert step.batch.weights.tolist() == [a.weight for a in answers for _ in a.tokens]
    groups = [g.index for g, a in step.analysis.iter_answers() for _ in a.tokens]
    assert step.batch.group_index is not None and step.batch.group_index.tolist() == groups
    assert [t.selected for a in step.answers for t in a.tokens] == flags


def _update_inputs(monkeypatch: pytest.MonkeyPatch, policy: TrainablePolicy) -> list[int]:
    """The rows of each LM-head product the policy runs inside the step's update."""
    import gmts_core.grpo.step as step_module

    inputs: list[int] = []
    inside = [False]
    update = step_module.policy_update

    def timed(*args: Any, **kwargs: Any) -> Any:
        inside[0] = True
        try:
            return update(*args, **kwargs)
        finally:
            inside[0] = False

    monkeypatch.setattr(step_module, "policy_update", timed)
    policy.model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _out: inputs.append(args[0].shape[0]) if inside[0] else None
    )
    return inputs


@pytest.mark.parametrize("seed", [3, 2])  # some selected tokens with A = 0 / all rewards equal
def test_the_update_on_its_loss_rows_only_gives_the_every_row_gradient(
    lm: LoadedModel, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Without a KL term or report and with one update per batch, the update runs the model
    only on what its loss can depend on (:func:`gmts_core.grpo.update.loss_rows`: selected
    tokens with A != 0 and the measured ones, each answer up to its last such token, the LM
    head on those rows); its gradient, loss and counts are those of the every-row update
    (``measure_kl`` on), its pi_old log-probs the same on the rows it computed and NaN (not
    measured) elsewhere. Entropy's selection takes tokens of any advantage."""
    config = dataclasses.replace(
        CONFIG,
        method="entropy",
        learning_rate=0.0,
        fused_max_tokens=0,  # no held training forward: the update runs its own
        measure_logprob_after=seed == 3,
        logprob_after_prompts=1,
    )
    runs = {}
    for measure_kl in (True, False):
        policy = TrainablePolicy(lm, PolicySettings(kind="full"))
        cfg = dataclasses.replace(config, measure_kl=measure_kl)
        with monkeypatch.context() as patch:
            inputs = _update_inputs(patch, policy)
            step = grpo_step(policy, make_optimizer(policy, cfg), PROMPTS, cfg, seed=seed)
        grads = [p.grad.clone() for p in policy.trainable_parameters()]
        runs[measure_kl] = (step, grads, inputs)
    (full, full_grads, full_inputs), (rows, rows_grads, inputs) = runs[True], runs[False]
    batch = full.batch
    assert torch.equal(batch.mask, rows.batch.mask)
    needed = batch.mask & (batch.advantages != 0)
    assert int(needed.sum()) < int(batch.mask.sum()), "some selected tokens must have A = 0"
    for g0, g1 in zip(full_grads, rows_grads, strict=True):
        torch.testing.assert_close(g1, g0, rtol=1e-5, atol=1e-8)
    for name in ("loss", "policy_loss", "selected_fraction", "clip_low_fraction"):
        assert getattr(rows.metrics, name) == pytest.approx(getattr(full.metrics, name), rel=1e-5)
    measured = torch.zeros_like(needed)
    if full.logprob_after is not None:
        measured = ~torch.isnan(full.logprob_after)
        torch.testing.assert_close(rows.logprob_after, full.logprob_after, equal_nan=True)
    computed = ~torch.isnan(rows.logprob_before)
    assert torch.equal(computed, needed | measured)
    torch.testing.assert_close(rows.logprob_before[computed], full.logprob_before[computed])
    # the LM head ran on the computed rows only (and the every-row update on every row);
    # where no token's term can be non-zero, the update ran no forward at all
    # (the log-prob-after pass follows, on the measured rows)
    after = [int(measured.sum())] if full.logprob_after is not None else []
    assert batch.num_tokens in full_inputs and full_inputs[len(full_inputs) - len(after) :] == after
    if bool(computed.any()):
        assert inputs == [int(computed.sum()), *after]
    else:
        assert inputs == [] and all(not g.any() for g in rows_grads)
