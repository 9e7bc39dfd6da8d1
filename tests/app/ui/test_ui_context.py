"""The UI handlers' error path: a library input error becomes the toast's message, logged as
one line (no traceback in the server log for an ordinary form error)."""

from __future__ import annotations

import logging

import gradio as gr
import pytest

from app.ui.context import call
from gmts_core.errors import InvalidInputError


def test_an_input_error_is_a_toast_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    def refuse() -> None:
        raise InvalidInputError("ratio must be in [1e-06, 1]")

    with caplog.at_level(logging.INFO, logger="app.ui.context"):
        with pytest.raises(gr.Error) as info:
            call(refuse)
    assert info.value.message == "ratio must be in [1e-06, 1]"
    assert info.value.print_exception is False  # Gradio prints no traceback for it
    (record,) = [r for r in caplog.records if r.name == "app.ui.context"]
    assert "ratio must be in" in record.getMessage() and record.exc_info is None


def test_other_errors_are_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError):
        call(lambda: 1 / 0)
