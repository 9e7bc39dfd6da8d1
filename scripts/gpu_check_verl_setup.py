"""Inputs for scripts/gpu_check_verl.sh, made offline: the bundled demo model with a plain chat
template, the demo arithmetic task as verl parquet (data_source, prompt messages,
reward_model.ground_truth), and a reward function for it.

    python scripts/gpu_check_verl_setup.py OUT_DIR   ->  OUT_DIR/{model,data/train.parquet,
                                                         data/test.parquet}
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "gmts_core" / "demo" / "tiny-arith"
# verl renders prompts with the tokenizer's chat template; the demo model was trained on raw text
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1 when the last number of the answer is the reference (the project's numeric rule)."""
    import re

    numbers = re.findall(r"-?\d+", solution_str)
    return 1.0 if numbers and numbers[-1] == str(ground_truth) else 0.0


def problems(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        op = rng.choice("+-")
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if op == "-":
            a, b = max(a, b), min(a, b)
            if a == b:
                a, b = 99, 10
        value = a + b if op == "+" else a - b
        rows.append(
            {
                "data_source": "gmts_arith",
                "prompt": [{"role": "user", "content": f"Q: {a}{op}{b}=?\nA:"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(value)},
                "extra_info": {"split": "train"},
            }
        )
    return rows


def main(out: Path) -> None:
    model = out / "model"
    shutil.copytree(MODEL, model, dirs_exist_ok=True)
    cfg_path = model / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2))
    (out / "data").mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train", 64, 0), ("test", 8, 1)):
        pq.write_table(pa.Table.from_pylist(problems(n, seed)), out / "data" / f"{name}.parquet")
    print(f"model {model}, data {out / 'data'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
