"""Run names and reasons in the Runs tab's Markdown are shown literally, escaped once: a name
like ``<img src=x onerror=...>`` is neither markup nor shown as ``&lt;img``. Rendered with a
CommonMark renderer (markdown-it), whose escapes the browser's Markdown renderer shares."""

from __future__ import annotations

import html

import pytest
from markdown_it import MarkdownIt

from app.schemas.runs import RunInfo, RunsResponse
from app.ui.tabs.runs.view import md_code, md_text, unreadable_note

render = MarkdownIt("commonmark").render
NAMES = [
    "<img src=x onerror=alert(1)>",
    "a `tick` and ``two``",
    "*stars* _under_ [link](http://x) #hash | pipe & amp; &lt;",
    "back\\slash\\`",
]


@pytest.mark.parametrize("name", NAMES)
def test_names_and_reasons_render_as_their_own_text(name: str) -> None:
    for rendered in (render(md_text(name)), render(md_code(name))):
        assert "<img" not in rendered and "<a " not in rendered and "<em>" not in rendered
        text = html.unescape(rendered.replace("<p>", "").replace("</p>", ""))
        text = text.replace("<code>", "").replace("</code>", "").strip()
        assert text == name, (name, rendered)


def test_the_unreadable_note_shows_the_name_once_escaped() -> None:
    bad = RunInfo(
        id=NAMES[0], readable=False, reason=NAMES[0], format=None, logged=False,
        num_steps=None, first_step=None, last_step=None,
    )
    note = unreadable_note(RunsResponse(runs=[bad], formats=[]))
    rendered = render(note)
    assert "<img" not in rendered and "&amp;lt;" not in rendered
    assert html.unescape(rendered).count(NAMES[0]) == 2
