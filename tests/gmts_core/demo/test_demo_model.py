"""The bundled demo model: tokenizer round trip, offline loading with plain transformers, size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gmts_core.demo import DEMO_ALIAS, DEMO_MODEL_DIR
from gmts_core.demo.tokenizer import build_tokenizer
from gmts_core.sampling.answers import SamplingConfig
from gmts_core.tasks.arith import example_prompts, flawed_solution, generate_problems

MAX_WEIGHTS_BYTES = 20 * 1024 * 1024
MAX_PARAMS = 5_000_000


def test_tokenizer_round_trips_task_text() -> None:
    tokenizer = build_tokenizer()
    texts = [p.prompt + p.solution for p in generate_problems(50, seed=1)]
    texts += [flawed_solution(47, 38, "+", "forgot_carry"), "  two  spaces and\nlines! {x} ~"]
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        assert "".join(tokenizer.decode([i]) for i in ids) == text  # token texts concatenate
    assert tokenizer.unk_token_id not in tokenizer(texts[0])["input_ids"]
    assert tokenizer.decode(tokenizer("a\tb")["input_ids"]) == "a<unk>b"  # ASCII printables only


def test_tokenizer_has_one_token_per_digit_and_the_task_words() -> None:
    tokenizer = build_tokenizer()
    for piece in [*"0123456789+-=", " carry", " borrow", " answer"]:
        ids = tokenizer(piece.strip(), add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, piece


def test_shipped_folder_is_complete_and_small() -> None:
    names = {p.name for p in DEMO_MODEL_DIR.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= names
    assert (DEMO_MODEL_DIR / "model.safetensors").stat().st_size <= MAX_WEIGHTS_BYTES
    config = json.loads((DEMO_MODEL_DIR / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert DEMO_MODEL_DIR.name == DEMO_ALIAS


def test_shipped_model_loads_offline_and_answers_a_heldout_prompt() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR, local_files_only=True)
    assert sum(p.numel() for p in model.parameters()) <= MAX_PARAMS
    assert tokenizer.pad_token is not None and tokenizer.eos_token is not None
    problems = generate_problems(8, seed=0, split="heldout")
    batch = tokenizer([p.prompt for p in problems], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=48)
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    verdicts = [p.reward(t).verdict for p, t in zip(problems, texts, strict=True)]
    assert all(v in ("correct", "incorrect") for v in verdicts), texts  # a number was found
    assert all(p.fork_spans_in(t) for p, t in zip(problems, texts, strict=True)), texts
    assert verdicts.count("correct") >= 6, texts  # greedy decoding is nearly always right


def test_shipped_model_loads_without_project_code_or_network(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "assert 'gmts_core' not in sys.modules\n"
        f"folder = {str(DEMO_MODEL_DIR)!r}\n"
        "tok = AutoTokenizer.from_pretrained(folder)\n"
        "model = AutoModelForCausalLM.from_pretrained(folder)\n"
        f"ids = tok({example_prompts()[1].prompt!r}, return_tensors='pt')\n"
        "out = model.generate(**ids, max_new_tokens=48)\n"
        "print(tok.decode(out[0, ids['input_ids'].shape[1]:], skip_special_tokens=True))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "answer" in done.stdout


@pytest.mark.slow
def test_training_from_scratch_runs_and_saves_a_loadable_model(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from gmts_core.demo.evaluate import DemoEvalConfig, evaluate_demo_model
    from gmts_core.demo.train import TrainConfig, train_demo_model

    folder = train_demo_model(tmp_path / "m", TrainConfig(steps=30, batch_size=16), progress=False)
    model = AutoModelForCausalLM.from_pretrained(folder)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    sampling = SamplingConfig(num_samples=2, max_new_tokens=48)
    result = evaluate_demo_model(model, tokenizer, DemoEvalConfig(num_prompts=2, sampling=sampling))
    assert 0.0 <= result.accuracy_t1 <= 1.0
    recipe = json.loads((folder / "training_config.json").read_text())
    assert recipe["steps"] == 30
