"""verl mini-batches on CPU for the tests: padded rows -> verl's own no-padding TensorDict.

Each row is a prompt of ``prompt_len`` tokens and a response of its own length; the batch goes
through verl's ``left_right_2_no_padding`` exactly as the trainer sends it to the actor.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass

import numpy as np
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.padding import left_right_2_no_padding

VOCAB = 11


@dataclass
class Rows:
    """Padded (B, T) response tensors of a test batch, and its uids."""

    response_mask: torch.Tensor  # (B, T) int
    old_log_prob: torch.Tensor  # (B, T)
    log_prob: torch.Tensor  # (B, T)
    ref_log_prob: torch.Tensor  # (B, T)
    advantages: torch.Tensor  # (B, T), one value per row (GRPO)
    entropy: torch.Tensor  # (B, T)
    uids: list[str]
    responses: torch.Tensor  # (B, T) token ids
    prompts: torch.Tensor  # (B, P) token ids (left-padded: all valid here)


def make_rows(
    group_sizes: list[int], max_len: int = 9, seed: int = 0, shuffle: bool = True
) -> Rows:
    """Groups of the given sizes (rows with one uid), responses of 1..max_len tokens, rows
    shuffled (verl's balance_batch separates a group's rows); float noise so no score ties."""
    gen = torch.Generator().manual_seed(seed)
    uids = [f"q{g}" for g, n in enumerate(group_sizes) for _ in range(n)]
    b = len(uids)
    perm = torch.randperm(b, generator=gen) if shuffle else torch.arange(b)
    uids = [uids[i] for i in perm.tolist()]
    lengths = torch.randint(1, max_len + 1, (b,), generator=gen)
    lengths[0] = max_len  # the padded width is max_len
    mask = (torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)).long()
    old = -torch.rand(b, max_len, generator=gen) * 3 - 0.05
    logp = old + torch.randn(b, max_len, generator=gen) * 0.15
    ref = old + torch.randn(b, max_len, generator=gen) * 0.1
    adv_row = torch.randn(b, generator=gen)
    adv = adv_row.unsqueeze(1) * mask
    ent = torch.rand(b, max_len, generator=gen) * 2 + 0.01
    responses = torch.randint(0, VOCAB, (b, max_len), generator=gen)
    group_prompts = torch.randint(0, VOCAB, (len(group_sizes), 3), generator=gen)
    prompts = group_prompts[torch.tensor([int(u[1:]) for u in uids])]  # one prompt per group
    m = mask.bool()
    return Rows(mask, old * m, logp * m, ref * m, adv, ent * m, uids, responses, prompts)


LAYOUTS = ("padded", "jagged")


def to_tensordict(
    rows: Rows, advantages: torch.Tensor | None = None, layout: str = "padded"
) -> TensorDict:
    """The actor's no-padding mini-batch as a verl 0.9.1 trainer sends it: ``padded`` (the
    legacy trainer, ``trainer.use_v1=false``: verl's left_right_2_no_padding of the padded
    rows, response fields padded to the batch's width) or ``jagged`` (the default
    ``trainer.use_v1=true``: TransferQueue's rows, prompts and response fields jagged)."""
    b, t = rows.response_mask.shape
    p = rows.prompts.shape[1]
    attention = torch.cat([torch.ones(b, p, dtype=torch.long), rows.response_mask], dim=1)
    input_ids = torch.cat([rows.prompts, rows.responses * rows.response_mask], dim=1)
    position_ids = (attention.cumsum(-1) - 1).clamp_min(0)
    proto = DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention,
            "position_ids": position_ids,
            "prompts": rows.prompts,
            "responses": rows.responses,
            "response_mask": rows.response_mask,
            "old_log_probs": rows.old_log_prob,
            "ref_log_prob": rows.ref_log_prob,
            "advantages": rows.advantages if advantages is None else advantages,
            "row_id": torch.arange(b),
        },
        non_tensors={"uid": np.array(rows.uids, dtype=object)},
    )
    td = left_right_2_no_padding(proto.to_tensordict())
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    return _jagged(td) if layout == "jagged" else td


def _jagged(td: TensorDict) -> TensorDict:
    """The v1 trainer's layout of a left_right_2_no_padding batch (see :func:`to_tensordict`)."""
    lengths = td["response_mask"].sum(-1).tolist()

    def jag(t: torch.Tensor, n: list[int]) -> torch.Tensor:
        return torch.nested.as_nested_tensor(
            [t[i, :k] for i, k in enumerate(n)], layout=torch.jagged
        )

    fields = {k: jag(td[k], lengths) for k in ("old_log_probs", "ref_log_prob", "advantages")}
    fields["responses"] = jag(td["responses"], lengths)
    fields["response_mask"] = jag(td["response_mask"], lengths)
    fields["prompts"] = jag(td["prompts"], [td["prompts"].shape[1]] * len(lengths))
    for key in (*fields, "attention_mask", "loss_mask", "max_response_len", "max_seq_len"):
        if key in td.keys():
            del td[key]
    for key, value in fields.items():
        td[key] = value
    td["loss_mask"] = td["response_mask"]
    return td


def full_sequence(values: torch.Tensor, rows: Rows) -> torch.Tensor:
    """A padded (B, T) response quantity as the model's jagged output over whole sequences
    (position j holds the value for token j + 1, as verl's no_padding_2_padding expects)."""
    p = rows.prompts.shape[1]
    seqs = []
    for i in range(values.shape[0]):
        n = int(rows.response_mask[i].sum())
        full = torch.zeros(p + n, dtype=values.dtype)
        full = torch.cat([full[: p - 1], values[i, :n], full[-1:]])
        seqs.append(full)
    return torch.nested.as_nested_tensor(seqs, layout=torch.jagged)


@functools.cache
def _default_actor():
    import verl

    path = f"{verl.__path__[0]}/trainer/config/_generated_ppo_trainer.yaml"
    return OmegaConf.load(path).actor_rollout_ref.actor


def actor_config(**overrides):
    """verl's default FSDP actor config with the GMTS policy-loss config and ``overrides``."""
    actor = copy.deepcopy(_default_actor())
    OmegaConf.set_struct(actor, False)
    actor.policy_loss._target_ = "gmts_core.integrations.verl.GMTSPolicyLossConfig"
    actor.ppo_micro_batch_size_per_gpu = 2
    policy = {k: v for k, v in overrides.items() if k.startswith("gmts_") or k == "loss_mode"}
    for k, v in policy.items():
        actor.policy_loss[k] = v
    for k, v in overrides.items():
        if k not in policy:
            actor[k] = v
    return omega_conf_to_dataclass(actor)


SCALE = 12  # actor.loss_scale_factor of seq-mean-token-sum-norm (not the padded width, 9)


def agg_settings(agg: str) -> dict:
    """The actor keys of aggregation ``agg`` (seq-mean-token-sum-norm needs its scale factor)."""
    extra = {"loss_scale_factor": SCALE} if agg == "seq-mean-token-sum-norm" else {}
    return {"loss_agg_mode": agg, **extra}


def subset(rows: Rows, idx: list[int]) -> Rows:
    """The rows ``idx`` of ``rows``, in that order."""
    t = torch.tensor(idx)
    return Rows(
        rows.response_mask[t],
        rows.old_log_prob[t],
        rows.log_prob[t],
        rows.ref_log_prob[t],
        rows.advantages[t],
        rows.entropy[t],
        [rows.uids[i] for i in idx],
        rows.responses[t],
        rows.prompts[t],
    )
