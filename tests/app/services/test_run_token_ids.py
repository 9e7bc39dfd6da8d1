"""A dump's or log's token ids outside the model's tokenizer are refused, naming the answer and
the id (a dump of another model read with the wrong one), before any text is decoded."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.services.run_dump_view import check_token_ids
from gmts_core.runs.base import RunFormatError


def test_ids_in_the_vocabulary_pass() -> None:
    check_token_ids([0, 5, 9], 10, Path("step_1.jsonl"), 0)
    check_token_ids([], 10, Path("step_1.jsonl"), 0)


@pytest.mark.parametrize("bad", [10, -1, 49_152])
def test_an_id_outside_the_vocabulary_is_refused_naming_it(bad: int) -> None:
    with pytest.raises(RunFormatError) as err:
        check_token_ids([1, bad, 2], 10, Path("step_1.jsonl"), 3)
    text = str(err.value)
    assert f"answer 3: token id {bad} is not in the vocabulary" in text and "10 tokens" in text
