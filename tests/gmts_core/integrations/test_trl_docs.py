"""Every Python block of docs/training-trl.md runs as written on a CPU, in a scratch folder.

A block is skipped only when the line before it carries the page's visible marker
``**GPU only**``; the skip reason is that line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "training-trl.md"
GPU_MARKER = "**GPU only**"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[tuple[int, str, str | None]]:
    """(line number, code, skip reason or None) of each fenced python block of the page."""
    text = PAGE.read_text(encoding="utf-8")
    blocks = []
    for m in FENCE.finditer(text):
        if m.group(1) != "python":
            continue
        before = [ln for ln in text[: m.start()].splitlines() if ln.strip()]
        marker = before[-1] if before and GPU_MARKER in before[-1] else None
        blocks.append((text[: m.start()].count("\n") + 1, m.group(2), marker))
    return blocks


def test_the_page_has_python_blocks_to_run() -> None:
    blocks = python_blocks()
    assert blocks, "docs/training-trl.md should show the trainer in Python"
    assert any(reason is None for _, _, reason in blocks), "at least one runs on CPU"


@pytest.mark.parametrize(
    ("line", "code", "reason"), python_blocks(), ids=lambda v: str(v) if isinstance(v, int) else ""
)
def test_python_block_runs_on_cpu(line: int, code: str, reason: str | None, tmp_path: Path) -> None:
    if reason is not None:
        pytest.skip(f"line {line}: {reason}")
    script = tmp_path / f"block_{line}.py"
    script.write_text(code, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "TOKENIZERS_PARALLELISM": "false",
    }
    proc = subprocess.run(
        [sys.executable, script.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"docs/training-trl.md line {line}:\n{proc.stderr[-4000:]}"
    # the block trained: TRL's trainer state lands in the output folder it named
    if "trainer.train()" in code:
        assert (tmp_path / "out").is_dir()
