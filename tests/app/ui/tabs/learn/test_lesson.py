"""The Learn tab's lesson for newcomers and the method/scope info text (no Gradio)."""

from __future__ import annotations

import re

from app.core.config import Settings
from app.services.catalog import capabilities
from app.ui import choices
from app.ui.tabs.learn import learn, lesson
from gmts_core.methods.selection import list_methods

METHODS = ("entropy", "gmts")


def test_lesson_walks_through_the_users_group(result: dict) -> None:
    html = learn.learn_html(result, METHODS, group_index=0)
    assert html.index("New to RLVR") < html.index("Rewards become group advantages")
    for title in ("RLVR in one picture", "The group and its rewards", "Forking tokens",
                  "equal rewards teaches nothing", "What GMTS changes"):  # fmt: skip
        assert title in html
    assert "<b>2</b> of 3 rewarded" in html  # 85 and 85 are right, 84 is not
    assert "of the gradient mass" in html
    # the step on equal rewards shows the batch's group that has them (group 1), not this one's
    step5 = html.split("equal rewards teaches nothing")[1].split("What GMTS changes")[0]
    assert "group 1 of this batch" in step5 and "<b>no gradient there</b>" in step5
    assert "advantages 0, 0" in step5 and "This group's rewards differ" in step5
    alone = {**result, "groups": result["groups"][:1]}  # no group with equal rewards
    step5 = learn.learn_html(alone, METHODS, 0).split("equal rewards teaches nothing")[1]
    assert "no group of this analysis has equal rewards" in step5.split("What GMTS changes")[0]


def test_zero_signal_group_is_never_called_gmts_choice(result: dict) -> None:
    html = learn.learn_html(result, METHODS, group_index=1)
    assert lesson.is_zero_signal(result["groups"][1])
    assert "GMTS's top token is" not in html and "no token is GMTS's choice" in html
    assert "<b>no gradient here</b>" in html and "nothing for GMTS to rank" in html
    assert "keeps" not in html.split("Why entropy misranks")[1].split("</section>")[0]


def test_every_method_and_scope_is_explained() -> None:
    text = choices.methods_markdown(capabilities(Settings()))
    for m in list_methods():
        assert f"**{m}**:" in text
    for scope in ("batch", "group", "answer"):
        assert f"**{scope}**:" in text


def test_view_export_is_one_self_contained_escaped_page(result: dict) -> None:
    from app.ui.tabs.explore.view_export import view_html, write_view_html

    evil = "<script>window.__pwned=1</script>"
    bad = {**result, "groups": [{**result["groups"][0], "prompt": evil}, result["groups"][1]]}
    page = view_html(bad, METHODS, "entropy", 0)
    assert page.startswith("<!DOCTYPE html>") and "__gmtsTipInstalled" in page  # JS inlined
    assert "<link" not in page and " src=" not in page  # nothing fetched from anywhere
    assert evil not in page and "&lt;script&gt;" in page
    n = result["groups"][0]["summary"]["num_tokens"]
    assert len(re.findall(r'class="tok[ "]', page)) == n and "summary-list" in page
    path = write_view_html(result, METHODS, "entropy", 1)
    assert path.suffix == ".html" and "no-gradient" in path.read_text(encoding="utf-8")
