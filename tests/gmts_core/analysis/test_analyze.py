"""End to end: ``analyze`` on tiny Llama / Qwen2 / GPT-2 models.

Per-token fields are checked against a direct computation from the model's full logits (one
unpadded forward pass per answer, float64 formulas), so the padded, head-only-at-answer-tokens
forward path of gmts_core.stats.forward is verified for every architecture.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.testing import assert_close

from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, RewardSpec, analyze
from gmts_core.errors import InvalidInputError
from gmts_core.model.loading import LoadedModel, load_model
from gmts_core.sampling.answers import SamplingConfig, sample_answers
from gmts_core.stats.forward import answer_token_stats

PROMPT = "Q: 47+38=?"
ANSWERS = ["A: 7+8=15 carry 1, 4+3+1=8, answer 85", "85", "answer 84 Grüße 😀", "I think 58."]
REWARDS = [1.0, 1.0, 0.0, 0.0]


def direct_stats(
    lm: LoadedModel, prompt: str, answer: str, tau: float, k: int
) -> dict[str, torch.Tensor]:
    """Statistics of one answer from the model's full logits, in float64."""
    tok = lm.tokenizer
    p = list(tok(prompt)["input_ids"])
    a = list(tok(answer, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logits = lm.model(torch.tensor([p + a])).logits[0].double()  # (T, V)
    z = logits[len(p) - 1 : len(p) - 1 + len(a)] / tau  # position t predicts token t + 1
    logp = torch.log_softmax(z, -1)
    pi = logp.exp()
    y = torch.tensor(a).unsqueeze(-1)
    lp = logp.gather(-1, y).squeeze(-1)
    top = logp.topk(k, dim=-1)
    return {
        "ids": torch.tensor(a),
        "logprob": lp,
        "prob": lp.exp(),
        "entropy": -(pi * logp).sum(-1),
        "grad_norm": (1 - 2 * lp.exp() + (pi * pi).sum(-1)).clamp_min(0).sqrt() / tau,
        "top_ids": top.indices,
        "top_prob": top.values.exp(),
    }


def _field(tokens: list[Any], name: str) -> torch.Tensor:
    return torch.tensor([getattr(t, name) for t in tokens], dtype=torch.float64)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("tau", [1.0, 0.6])
def test_token_fields_match_the_full_logits(
    arch: str, tau: float, tiny_lm: Callable[[str], LoadedModel]
) -> None:
    lm = tiny_lm(arch)
    cfg = AnalysisConfig(temperature=tau, top_alternatives=3, chunk_size=4)  # several chunks
    res = analyze(lm, [GroupInput(PROMPT, answers=ANSWERS, rewards=REWARDS)], cfg)
    answers = res.groups[0].answers
    assert len(answers) == len(ANSWERS)
    for text, ans in zip(ANSWERS, answers, strict=True):
        want = direct_stats(lm, PROMPT, text, tau, 3)
        assert [t.id for t in ans.tokens] == want["ids"].tolist()
        assert [t.position for t in ans.tokens] == list(range(len(ans.tokens)))
        for name in ("logprob", "prob", "entropy", "grad_norm"):
            assert_close(_field(ans.tokens, name), want[name], atol=2e-5, rtol=1e-4)
        assert [[alt["id"] for alt in t.alternatives] for t in ans.tokens] == want[
            "top_ids"
        ].tolist()
        got_top = torch.tensor([[alt["prob"] for alt in t.alternatives] for t in ans.tokens])
        assert_close(got_top.double(), want["top_prob"], atol=1e-5, rtol=1e-4)
        assert "".join(t.text for t in ans.tokens) == ans.decoded  # token texts join exactly
        assert ans.text.strip() == text.strip()


def test_lm_head_runs_only_at_answer_positions_in_chunks(
    tiny_lm: Callable[[str], LoadedModel],
) -> None:
    """The efficiency claim of forward.py: full-vocabulary logits exist only for answer tokens,
    never more than chunk_size rows at a time, and the body runs once per micro-batch."""
    lm = tiny_lm("llama")
    head = lm.model.get_output_embeddings()
    body = getattr(lm.model, lm.model.base_model_prefix)
    head_shapes: list[tuple[int, ...]] = []
    body_calls: list[int] = []
    hooks = [
        head.register_forward_hook(lambda mod, inp, out: head_shapes.append(tuple(out.shape))),
        body.register_forward_hook(lambda mod, inp, out: body_calls.append(1)),
    ]
    try:
        group = GroupInput(PROMPT, answers=ANSWERS, rewards=REWARDS)
        res = analyze(lm, [group], AnalysisConfig(chunk_size=4))
    finally:
        for h in hooks:
            h.remove()
    assert all(len(shape) == 2 for shape in head_shapes)  # (C, V) slices, never (B, T, V)
    assert sum(shape[0] for shape in head_shapes) == res.summary["num_tokens"]  # answers only
    assert max(shape[0] for shape in head_shapes) <= 4
    assert len(body_calls) == 1  # one padded forward pass over all answers of the group


def test_micro_batches_give_the_same_stats(tiny_lm: Callable[[str], LoadedModel]) -> None:
    lm = tiny_lm("gpt2")
    tok = lm.tokenizer
    p = list(tok(PROMPT)["input_ids"])
    seqs = [(p, list(tok(a, add_special_tokens=False)["input_ids"])) for a in ANSWERS]
    one = answer_token_stats(lm.model, seqs, tok.pad_token_id, max_batch_tokens=10_000)
    many = answer_token_stats(lm.model, seqs, tok.pad_token_id, max_batch_tokens=8)  # one per batch
    for a, b in zip(one, many, strict=True):
        assert_close(a.stats.entropy, b.stats.entropy, atol=1e-5, rtol=1e-5)
        assert_close(a.stats.logprob, b.stats.logprob, atol=1e-5, rtol=1e-5)


def test_group_quantities(tiny_llama: LoadedModel) -> None:
    cfg = AnalysisConfig(advantage="dr_grpo", loss_aggregation="seq_mean_token_mean")
    res = analyze(tiny_llama, [GroupInput(PROMPT, answers=ANSWERS, rewards=REWARDS)], cfg)
    answers = res.groups[0].answers
    assert [a.reward for a in answers] == REWARDS
    assert [a.advantage for a in answers] == pytest.approx([0.5, 0.5, -0.5, -0.5])
    for a in answers:
        assert a.weight == pytest.approx(1 / (len(answers) * a.length))
        for t in a.tokens:
            assert t.grad_proxy == pytest.approx(abs(a.advantage) * a.weight * t.grad_norm)
            assert t.scores["gmts"] == t.grad_proxy
            assert t.scores["entropy"] == t.entropy
            assert t.scores["surprisal"] == pytest.approx(-t.logprob)
            assert t.scores["gmts_entropy"] == pytest.approx(
                abs(a.advantage) * a.weight * t.entropy
            )
    tokens = [t for a in answers for t in a.tokens]
    best = min(tokens, key=lambda t: t.ranks["gmts"])
    assert best.ranks["gmts"] == 1 and best.grad_proxy == max(t.grad_proxy for t in tokens)


def test_reward_rule_explains_each_answer(tiny_llama: LoadedModel) -> None:
    g = GroupInput(PROMPT, answers=ANSWERS, reward=RewardSpec("numeric", "85"))
    res = analyze(tiny_llama, [g])
    details = [a.reward_detail for a in res.groups[0].answers]
    assert [d.reward for d in details] == [1.0, 1.0, 0.0, 0.0]
    assert [d.extracted for d in details] == ["85", "85", "84", "58"]
    assert {d.rule for d in details} == {"numeric"} and {d.reference for d in details} == {"85"}
    assert details[2].verdict == "incorrect"


def test_sampled_answers_match_sample_answers(tiny_lm: Callable[[str], LoadedModel]) -> None:
    lm = tiny_lm("qwen2")
    sampling = SamplingConfig(num_samples=3, max_new_tokens=6, seed=11)
    res = analyze(lm, [GroupInput(PROMPT, sampling=sampling, rewards=[1.0, 0.0, 0.0])])
    p = list(lm.tokenizer(PROMPT)["input_ids"])
    direct = sample_answers(lm.model, lm.tokenizer, p, sampling)
    answers = res.groups[0].answers
    assert [[t.id for t in a.tokens] for a in answers] == [d.token_ids for d in direct]
    assert [a.finished for a in answers] == [d.finished for d in direct]
    assert all(a.length <= 6 for a in answers)
    again = analyze(lm, [GroupInput(PROMPT, sampling=sampling, rewards=[1.0, 0.0, 0.0])])
    assert again == res  # seeded: the whole analysis is reproducible


@pytest.mark.parametrize("scope", ["batch", "group", "answer"])
def test_batch_of_groups_with_scopes(scope: str, tiny_lm: Callable[[str], LoadedModel]) -> None:
    lm = tiny_lm("gpt2")
    groups = [
        GroupInput(PROMPT, answers=ANSWERS, rewards=REWARDS),
        GroupInput("2+2=?", answers=["4", "four, I think", "5"], reward=RewardSpec("numeric", "4")),
    ]
    res = analyze(lm, groups, AnalysisConfig(ratio=0.3, scope=scope))
    assert [g.prompt for g in res.groups] == [PROMPT, "2+2=?"]
    assert res.summary["num_groups"] == 2
    assert res.summary["num_tokens"] == sum(a.length for g in res.groups for a in g.answers)
    units: list[list[Any]] = []  # the token lists of each scope
    if scope == "batch":
        units = [[t for g in res.groups for a in g.answers for t in a.tokens]]
    elif scope == "group":
        units = [[t for a in g.answers for t in a.tokens] for g in res.groups]
    else:
        units = [a.tokens for g in res.groups for a in g.answers]
    for tokens in units:
        for m in ("entropy", "gmts", "random"):
            assert sum(t.selected[m] for t in tokens) == math.ceil(round(0.3 * len(tokens), 9))
            assert sorted(t.ranks[m] for t in tokens) == list(range(1, len(tokens) + 1))
    assert res.summary["k"] == sum(math.ceil(round(0.3 * len(u), 9)) for u in units)
    # token_mean weights are over the whole batch, as trainers aggregate the loss
    n_all = res.summary["num_tokens"]
    assert all(a.weight == pytest.approx(1 / n_all) for g in res.groups for a in g.answers)


def test_zero_signal_group_in_a_batch(tiny_lm: Callable[[str], LoadedModel]) -> None:
    """A group with equal rewards carries no signal: GMTS spends none of its budget there."""
    lm = tiny_lm("llama")
    groups = [
        GroupInput(PROMPT, answers=ANSWERS, rewards=REWARDS),
        GroupInput("Say hi", answers=["hi there", "hello 😀", "hey"], rewards=[0.1, 0.1, 0.1]),
    ]
    res = analyze(lm, groups, AnalysisConfig(ratio=0.2))
    s = res.summary
    assert s["zero_signal"] is False and s["num_zero_signal_groups"] == 1
    zero = res.groups[1]
    assert zero.summary["zero_signal"] is True and res.groups[0].summary["zero_signal"] is False
    assert all(a.advantage == 0.0 for a in zero.answers)
    assert all(t.grad_proxy == 0.0 for a in zero.answers for t in a.tokens)
    assert not any(t.selected["gmts"] for a in zero.answers for t in a.tokens)
    assert s["wasted_share"]["gmts"] == 0.0
    ent_in_zero = sum(t.selected["entropy"] for a in zero.answers for t in a.tokens)
    assert s["wasted_share"]["entropy"] == pytest.approx(
        ent_in_zero / s["selected_count"]["entropy"]
    )
    assert s["budget_share"]["gmts"] == [1.0, 0.0]


def test_single_zero_signal_group_says_so(tiny_llama: LoadedModel) -> None:
    res = analyze(tiny_llama, [GroupInput(PROMPT, answers=ANSWERS[:2], rewards=[1.0, 1.0])])
    assert res.summary["zero_signal"] is True
    assert res.summary["gradient_coverage"]["gmts"] == 0.0  # nothing to cover
    assert res.summary["gradient_coverage"]["all"] == 1.0


@pytest.mark.parametrize(
    ("group", "config", "match"),
    [
        (
            GroupInput(PROMPT, answers=["a", "b"], rewards=[1.0]),
            AnalysisConfig(),
            "1 rewards for 2 answers",
        ),
        (GroupInput(PROMPT, answers=["a", "b"]), AnalysisConfig(), "reward"),
        (
            GroupInput(PROMPT, answers=["a", ""], rewards=[1.0, 0.0]),
            AnalysisConfig(),
            "at least one token",
        ),
        (GroupInput(PROMPT, answers=["a"], rewards=[1.0]), AnalysisConfig(ratio=0.0), "ratio"),
        (
            GroupInput(PROMPT, answers=["a"], rewards=[1.0]),
            AnalysisConfig(temperature=0.0),
            "temperature",
        ),
        (GroupInput(PROMPT, answers=["a"], rewards=[1.0]), AnalysisConfig(scope="world"), "scope"),
        (
            GroupInput(PROMPT, answers=["a"], rewards=[1.0]),
            AnalysisConfig(methods=("magic",)),
            "valid",
        ),
        (GroupInput(PROMPT, answers=["a"], rewards=[1.0]), AnalysisConfig(advantage="ppo"), "grpo"),
        (GroupInput(PROMPT, answers=["a"], rewards=[float("nan")]), AnalysisConfig(), "finite"),
        (
            GroupInput(PROMPT, answers=["a"], reward=RewardSpec("fuzzy", "x")),
            AnalysisConfig(),
            "numeric",
        ),
    ],
)
def test_bad_input_is_an_invalid_input_error(
    group: GroupInput, config: AnalysisConfig, match: str, tiny_llama: LoadedModel
) -> None:
    with pytest.raises(InvalidInputError, match=match):
        analyze(tiny_llama, [group], config)


def test_no_groups_is_an_error(tiny_llama: LoadedModel) -> None:
    with pytest.raises(InvalidInputError, match="at least one group"):
        analyze(tiny_llama, [])


def test_base_model_is_not_changed(tiny_llama: LoadedModel) -> None:
    before = {k: v.clone() for k, v in tiny_llama.model.state_dict().items()}
    analyze(
        tiny_llama,
        [
            GroupInput(
                PROMPT, sampling=SamplingConfig(num_samples=2, max_new_tokens=4), rewards=[1, 0]
            )
        ],
    )
    after = tiny_llama.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not any(p.requires_grad for p in tiny_llama.model.parameters())


def test_chat_template_wraps_the_prompt(tiny_model_dir: Callable[[str], Any]) -> None:
    lm = load_model(tiny_model_dir("gpt2"), device="cpu", dtype="float32")  # private copy
    with pytest.raises(InvalidInputError, match="chat template"):
        analyze(
            lm,
            [GroupInput(PROMPT, answers=["85"], rewards=[1.0])],
            AnalysisConfig(chat_template=True),
        )
    lm.tokenizer.chat_template = "{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}Bot:"
    plain = analyze(lm, [GroupInput(PROMPT, answers=["85"], rewards=[1.0])])
    chat = analyze(
        lm, [GroupInput(PROMPT, answers=["85"], rewards=[1.0])], AnalysisConfig(chat_template=True)
    )
    p_chat = list(lm.tokenizer("User: " + PROMPT + "\nBot:")["input_ids"])
    want = direct_stats(lm, "User: " + PROMPT + "\nBot:", "85", 1.0, 1)
    assert len(p_chat) > 0
    got = _field(chat.groups[0].answers[0].tokens, "logprob")
    assert_close(got, want["logprob"], atol=2e-5, rtol=1e-4)
    assert (
        plain.groups[0].answers[0].tokens[0].logprob != chat.groups[0].answers[0].tokens[0].logprob
    )


def test_stages_are_announced_in_order(tiny_llama: LoadedModel) -> None:
    """``on_stage`` hears each stage as it begins, with (done, total) counting up."""
    heard: list[tuple[str, int, int]] = []
    sampled = GroupInput(PROMPT, sampling=SamplingConfig(num_samples=2, max_new_tokens=4))
    sampled.rewards = [1.0, 0.0]
    analyze(tiny_llama, [sampled], on_stage=lambda *a: heard.append(a))
    names = ["generating answers", "scoring rewards", "token statistics", "selection"]
    assert heard == [(n, i, 4) for i, n in enumerate(names)]
    heard.clear()
    analyze(
        tiny_llama,
        [GroupInput(PROMPT, answers=ANSWERS, rewards=REWARDS)],
        on_stage=lambda *a: heard.append(a),
    )
    assert [h[0] for h in heard] == ["tokenizing answers", *names[1:]]


def test_group_summaries_equal_the_batch_figures_within_each_group(
    tiny_lm: Callable[[str], LoadedModel],
) -> None:
    """Each group's summary (computed for all groups at once) equals the batch summary's
    functions applied to that group's tokens alone, a zero-signal group included."""
    from gmts_core.analysis.summaries import gradient_coverage, spearman_by_answer

    lm = tiny_lm("llama")
    groups = [
        GroupInput(PROMPT, answers=ANSWERS, rewards=REWARDS),
        GroupInput("Say hi", answers=["hi there", "hello 😀", "hey"], rewards=[0.1, 0.1, 0.1]),
        GroupInput("2+2=?", answers=["4", "four, I think", "5"], reward=RewardSpec("numeric", "4")),
    ]
    res = analyze(lm, groups, AnalysisConfig(ratio=0.3))
    for g in res.groups:
        tokens = [t for a in g.answers for t in a.tokens]
        entropy = torch.tensor([t.entropy for t in tokens], dtype=torch.float64)
        proxy = torch.tensor([t.grad_proxy for t in tokens], dtype=torch.float64)
        answer = torch.tensor([i for i, a in enumerate(g.answers) for _ in a.tokens])
        s = g.summary
        assert s["num_tokens"] == len(tokens)
        assert s["spearman_entropy_grad"] == pytest.approx(
            spearman_by_answer(entropy, proxy, answer)
        )
        for m in res.config.methods:
            selected = torch.tensor([t.selected[m] for t in tokens])
            assert s["selected_count"][m] == int(selected.sum())
            assert s["gradient_coverage"][m] == pytest.approx(gradient_coverage(proxy, selected))
    assert res.groups[1].summary["gradient_coverage"]["all"] == 1.0  # zero signal, all kept
    assert res.groups[1].summary["gradient_coverage"]["gmts"] == 0.0
