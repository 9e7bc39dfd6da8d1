"""A LoRA layer's merged weight gives its own output (to float32 rounding); what PEFT computes
differently (DoRA, active dropout) is not merged; the model's weights are never modified."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from gmts_core.model.lora_merge import linear_weights, mergeable_linear, mergeable_lora


class _Two(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(24, 40)
        self.other = torch.nn.Linear(40, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.other(self.proj(x))


def _adapted(**lora: object) -> torch.nn.Module:
    torch.manual_seed(0)
    model = get_peft_model(
        _Two(), LoraConfig(r=4, lora_alpha=8, target_modules=["proj", "other"], **lora)
    )
    with torch.no_grad():  # B starts at zero: give the adapter a real delta
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    return model.eval()


def test_merged_weight_gives_the_layers_output() -> None:
    model = _adapted(lora_dropout=0.0)
    inner = model.get_base_model()
    x = torch.randn(7, 24, generator=torch.Generator().manual_seed(3))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for layer, inputs in ((inner.proj, x), (inner.other, inner.proj(x))):
        assert mergeable_lora(layer) and mergeable_linear(layer)
        weight, bias = linear_weights(layer)
        with torch.no_grad():
            theirs = layer(inputs)
            base = layer.base_layer(inputs)
        ours = torch.nn.functional.linear(inputs, weight, bias)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
        assert (theirs - base).abs().amax() > 1e-2  # the adapter changes the output
    for name, param in model.named_parameters():  # nothing merged into the model itself
        assert torch.equal(param, before[name]), name
    with model.disable_adapter():  # the adapter off: the base layer's own weight
        assert torch.equal(linear_weights(inner.proj)[0], inner.proj.base_layer.weight)
    assert not torch.equal(linear_weights(inner.proj)[0], inner.proj.base_layer.weight)


def test_plain_linear_is_its_own_weights() -> None:
    layer = torch.nn.Linear(5, 3)
    weight, bias = linear_weights(layer)
    assert weight.data_ptr() == layer.weight.data_ptr() and bias is not None
    assert bias.data_ptr() == layer.bias.data_ptr()


@pytest.mark.parametrize(
    ("lora", "train"), [({"use_dora": True}, False), ({"lora_dropout": 0.1}, True)]
)
def test_what_peft_computes_otherwise_is_not_merged(lora: dict[str, object], train: bool) -> None:
    model = _adapted(**lora)
    model.train(train)
    layer = model.get_base_model().proj
    assert not mergeable_lora(layer) and not mergeable_linear(layer)
    with pytest.raises(ValueError, match="neither"):
        linear_weights(layer)
