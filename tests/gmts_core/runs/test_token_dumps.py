"""prime-rl token exports, NeMo-RL training dumps and open-instruct rollouts (the fixtures written
by their writers' own code: scripts/make_token_dump_fixtures.py) read back exactly as the
trainer wrote them: token ids, loss masks, per-token numbers, rewards and advantages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from gmts_core.runs import RunFormatError, UnsafeRunFormatError, detect_format, open_run

DATA = Path(__file__).resolve().parents[2] / "data" / "runs"
PRIME = DATA / "prime_rl"
NEMO = DATA / "nemo_rl"
OPEN_INSTRUCT = DATA / "open_instruct"
SLIME = DATA / "slime"


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def answers(run_path: Path, step: int) -> list:
    return [
        (ids, {c: v[i] for c, v in g.token_columns.items()}, g, i)
        for g in open_run(run_path).step(step).groups
        for i, ids in enumerate(g.token_ids or [])
    ]


def test_prime_rl_exports_read_as_written() -> None:
    assert detect_format(PRIME) == "prime_rl"
    run = open_run(PRIME)
    assert run.steps == [1, 2, 3]
    for step in run.steps:
        raw = lines(PRIME / "token_exports" / f"step_{step}" / "rank_0.jsonl")
        got = answers(PRIME, step)
        assert len(got) == len(raw)
        by_ids = {tuple(g.prompt_token_ids + ids): (cols, g, i) for ids, cols, g, i in got}
        for rec in raw:
            cols, group, i = by_ids[tuple(rec["token_ids"])]
            start = rec["loss_mask"].index(True)
            assert cols["loss_mask"] == [int(m) for m in rec["loss_mask"][start:]]
            assert cols["entropy"] == rec["entropy"][start:]
            assert cols["trainer_logprob"] == rec["trainer_logprobs"][start:]
            assert cols["inference_logprob"] == rec["inference_logprobs"][start:]
            assert cols["importance_ratio"] == rec["importance_ratio"][start:]
            assert cols["mismatch_kl"] == rec["mismatch_kl"][start:]
            assert group.advantages is not None
            assert group.advantages[i] == rec["advantages"][start]
            assert group.rewards is None  # prime-rl exports no reward


def test_nemo_rl_dumps_read_as_written() -> None:
    assert detect_format(NEMO) == "nemo_rl"
    folder = NEMO / "logs" / "exp_001"
    for step in open_run(NEMO).steps:
        raw = lines(folder / f"train_data_step{step}.jsonl")
        got = answers(NEMO, step)
        assert len(got) == len(raw)
        by_ids = {tuple(g.prompt_token_ids + ids): (cols, g, i) for ids, cols, g, i in got}
        for rec in raw:
            length = rec["input_lengths"][0]
            tokens = rec["token_ids"][0][:length]
            mask = rec["token_loss_mask"][0][:length]
            cols, group, i = by_ids[tuple(tokens)]
            start = mask.index(1)
            assert cols["loss_mask"] == mask[start:]
            assert cols["inference_logprob"] == rec["generation_logprobs"][0][start:length]
            assert cols["trainer_logprob"] == rec["prev_logprobs"][0][start:length]
            assert group.rewards is not None and group.advantages is not None
            assert group.rewards[i] == rec["rewards"][0]
            assert group.advantages[i] == rec["advantages"][0][start]


def test_open_instruct_rollouts_read_as_written() -> None:
    assert detect_format(OPEN_INSTRUCT) == "open_instruct"
    raw = lines(OPEN_INSTRUCT / "gmts_fixture_rollouts_000000.jsonl")
    run = open_run(OPEN_INSTRUCT)
    assert run.steps == sorted({r["step"] for r in raw})
    for step in run.iter_steps():
        mine = [r for r in raw if r["step"] == step.step]
        got = [
            (g.prompt_token_ids, ids, g.rewards[i], g.advantages[i], g.token_columns)
            for g in step.groups
            for i, ids in enumerate(g.token_ids or [])
            if g.rewards is not None and g.advantages is not None
        ]
        assert [
            (r["prompt_tokens"], r["response_tokens"], r["reward"], r["advantage"]) for r in mine
        ] == [g[:4] for g in got]
        assert [len(g.token_ids or []) for g in step.groups] == [4, 4, 4]  # by prompt_idx


def test_a_broken_line_names_the_file_and_line(tmp_path: Path) -> None:
    run = tmp_path / "nemo"
    shutil.copytree(NEMO / "logs" / "exp_001", run)
    path = run / "train_data_step2.jsonl"
    rows = path.read_text().splitlines()
    bad = json.loads(rows[1])
    bad["token_loss_mask"] = [[2] * len(bad["token_loss_mask"][0])]
    rows[1] = json.dumps(bad)
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(RunFormatError, match=r"train_data_step2\.jsonl:2.*not 0 or 1"):
        open_run(run).step(2)


def test_an_unfinished_prime_rl_step_drops_a_half_written_line(tmp_path: Path) -> None:
    run = tmp_path / "prime"
    shutil.copytree(PRIME, run)
    step = run / "token_exports" / "step_3"
    (step / "STABLE").unlink()
    file = step / "rank_0.jsonl"
    data = file.read_bytes()
    file.write_bytes(data + data.splitlines()[0][:100])  # a writer killed mid-line
    loaded = open_run(run).step(3)
    assert loaded.num_answers == 12


def test_slime_dumps_read_as_written() -> None:
    assert detect_format(SLIME) == "slime"
    run = open_run(SLIME)
    assert run.steps == [0, 1, 2]
    for step in run.iter_steps():
        raw = torch.load(SLIME / "rollout_data" / f"{step.step}.pt", weights_only=True)
        got = {
            g.extra["index"][i]: (g.prompt_token_ids + ids, g.rewards[i], g.token_columns, i)
            for g in step.groups
            for i, ids in enumerate(g.token_ids or [])
            if g.rewards is not None
        }
        assert len(got) == len(raw["samples"])
        for sample in raw["samples"]:
            tokens, reward, cols, i = got[sample["index"]]
            assert tokens == sample["tokens"] and reward == sample["reward"]
            assert cols["loss_mask"][i] == sample["loss_mask"]
            assert cols["inference_logprob"][i] == sample["rollout_log_probs"]


class Payload:
    """An object only full pickle can rebuild: its __reduce__ would run a command."""

    def __reduce__(self) -> tuple:
        return (print, ("pickle-was-loaded",))


def test_a_slime_dump_needing_full_pickle_is_refused_unrun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "slime" / "rollout_data"
    folder.mkdir(parents=True)
    raw = torch.load(SLIME / "rollout_data" / "0.pt", weights_only=True)
    raw["samples"][0]["metadata"] = {"x": Payload()}
    torch.save(raw, folder / "0.pt")
    with pytest.raises(UnsafeRunFormatError, match=r"weights_only=True"):
        open_run(tmp_path / "slime").step(0)
    assert "pickle-was-loaded" not in capsys.readouterr().out
