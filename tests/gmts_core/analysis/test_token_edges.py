"""A given answer token at a -inf logit (a model that masks part of its vocabulary) is analysed
with its defined values, checked against float64 from the model's full logits: log p = -inf,
H the entropy of the distribution, g = ||e_y - pi|| / tau; the response carries log p as null
(JSON has no infinity). A NaN logit still aborts the analysis."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from app.services.responses import analysis_json
from gmts_core.analysis.analyze import AnalysisConfig, GroupInput, analyze
from gmts_core.errors import NonFiniteLogitsError
from gmts_core.model.loading import LoadedModel

PROMPT = "Q: 47+38=?"
ANSWERS = ["85 apples", "84"]
TAU = 0.7


def masked_copy(lm: LoadedModel, token: int, value: float) -> LoadedModel:
    """``lm`` with its head's logit of ``token`` set to ``value`` at every position (a head with
    a bias: a masked vocabulary entry when ``value`` is -inf)."""
    model = copy.deepcopy(lm.model)
    head = model.lm_head
    masked = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        masked.weight.copy_(head.weight)
        masked.bias.zero_()
        masked.bias[token] = value
    model.lm_head = masked
    return dataclasses.replace(lm, model=model)


def test_a_target_at_a_minus_inf_logit_is_analysed_with_its_values(
    tiny_llama: LoadedModel,
) -> None:
    tok = tiny_llama.tokenizer
    p = list(tok(PROMPT)["input_ids"])
    a = list(tok(ANSWERS[0], add_special_tokens=False)["input_ids"])
    lm = masked_copy(tiny_llama, a[1], float("-inf"))
    res = analyze(
        lm,
        [GroupInput(PROMPT, answers=ANSWERS, rewards=[1.0, 0.0])],
        AnalysisConfig(temperature=TAU, top_alternatives=3),
    )
    with torch.no_grad():
        logits = lm.model(torch.tensor([p + a])).logits[0].double()  # (T, V)
    z = logits[len(p) : len(p) + 1] / TAU  # the position that predicts a[1]: (1, V)
    pi = torch.softmax(z, -1)[0]  # (V,)
    assert float(pi[a[1]]) == 0.0
    nz = pi[pi > 0]
    want_h = float(-(nz * nz.log()).sum())
    e_y = torch.zeros_like(pi)
    e_y[a[1]] = 1.0
    want_g = float((e_y - pi).norm()) / TAU

    token = res.groups[0].answers[0].tokens[1]
    assert token.logprob == float("-inf") and token.prob == 0.0
    assert token.entropy == pytest.approx(want_h, rel=1e-5)
    assert token.grad_norm == pytest.approx(want_g, rel=1e-5)

    body = analysis_json(res)["answers"][0]["tokens"][1]
    assert body["logprob"] is None and body["prob"] == 0.0
    assert body["entropy"] == pytest.approx(want_h, rel=1e-5)
    assert body["grad_norm"] == pytest.approx(want_g, rel=1e-5)
    assert body["scores"]["surprisal"] is None  # -log p = +inf


def test_a_nan_logit_still_aborts_the_analysis(tiny_llama: LoadedModel) -> None:
    lm = masked_copy(tiny_llama, 7, float("nan"))
    with pytest.raises(NonFiniteLogitsError):
        analyze(lm, [GroupInput(PROMPT, answers=ANSWERS, rewards=[1.0, 0.0])], AnalysisConfig())


def test_alternatives_carry_log_probs_from_the_log_softmax(tiny_llama: LoadedModel) -> None:
    """A near-certain alternative (one logit 36 above the rest): its log p is about -1.2e-13.
    float64 has it as -log1p(sum_{v != A} exp(z_v - z_A)); the log of its probability (1 - 1.2e-13
    rounded to float64) and even float64's z_A - logsumexp(z) (z_A is 36) miss it by about
    1e-3 relative. The alternative's ``logprob`` matches the log1p form to 1e-5, every other
    alternative's too, and the JSON carries it."""
    tok = tiny_llama.tokenizer
    p = list(tok(PROMPT)["input_ids"])
    a = list(tok(ANSWERS[0], add_special_tokens=False)["input_ids"])
    lm = masked_copy(tiny_llama, a[0], 36.0)
    res = analyze(
        lm,
        [GroupInput(PROMPT, answers=ANSWERS, rewards=[1.0, 0.0])],
        AnalysisConfig(top_alternatives=3),
    )
    with torch.no_grad():
        z = lm.model(torch.tensor([p + a])).logits[0, len(p) - 1].double()  # (V,) predicts a[0]
    top = int(z.argmax())
    rest = torch.cat([z[:top], z[top + 1 :]]) - z[top]  # (V - 1,) all < 0
    log_z = float(torch.log1p(rest.exp().sum()))  # log sum_v exp(z_v - z_A)
    want_ids = z.topk(3).indices.tolist()
    want = [float(z[i] - z[top]) - log_z for i in want_ids]
    alts = res.groups[0].answers[0].tokens[0].alternatives
    assert [alt["id"] for alt in alts] == want_ids and want_ids[0] == top
    assert -1e-12 < want[0] < 0
    for alt, lp in zip(alts, want, strict=True):
        assert alt["logprob"] == pytest.approx(lp, rel=1e-5, abs=0)
        assert alt["prob"] == math.exp(alt["logprob"])
    assert abs(math.log(alts[0]["prob"]) - want[0]) > 1e-4 * abs(want[0])  # the prob alone
    body = analysis_json(res)["answers"][0]["tokens"][0]["alternatives"]
    assert [b["logprob"] for b in body] == [alt["logprob"] for alt in alts]
