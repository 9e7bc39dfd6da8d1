"""Browser waits never read a property of an element that may not exist yet, and browser tests
never assert on the page with a read made at once.

Playwright's ``wait_for_function`` stops at the first exception its predicate throws, so
``document.querySelector('#x').value`` fails the test with "Cannot read properties of null"
whenever the page has not drawn ``#x`` yet (a loaded machine, a re-rendered component), instead
of waiting for it. A watcher the page runs later (an init script, a MutationObserver's or a
frame's callback) fails the same way, silently: what it was to record never comes, and the
test waits until its bound. Every wait and watcher in ``tests/browser`` and ``benchmarks``
(which the smoke tests run) reads such an element through ``?.`` (or checks it first).

An ``assert`` on a read of the page (``loc.count()``, ``loc.inner_text()``,
``loc.is_visible()``, ``loc.get_attribute(name)``...) reads it once: after a test waited for
one element, another one the same update draws (a Plotly chart, a Gradio output of a later
tick, what ``gmts.js`` draws) is often not there yet on a loaded 2-core machine, and the test
fails (a CI run failed so in tests/browser/test_analysed_runs.py). Playwright's ``expect``
retries its check until ``PATIENCE_MS`` (tests/browser/conftest.py sets it for every browser
test), so the browser tests assert on the page through ``expect`` only.

This reads their sources (no browser)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROWSER_TESTS = sorted((ROOT / "tests" / "browser").glob("*.py"))
SOURCES = [*BROWSER_TESTS, *sorted((ROOT / "benchmarks").glob("*.py"))]
WAITS = {"wait_for_function", "add_init_script"}
# JavaScript that runs later, in callbacks: a watcher
WATCHER = re.compile(r"MutationObserver|requestAnimationFrame|setTimeout|addEventListener")
# a property read straight off querySelector / getElementById / closest, which return null
UNGUARDED = re.compile(r"\b(?:querySelector|getElementById|closest)\((?:[^()]|\([^()]*\))*\)\s*\.")
# a Locator's (or an ElementHandle's) reads of the page, called with no argument; str.count and
# list.count take one, so a `.count()` with none is a locator's
PAGE_READS = {
    "count",
    "inner_text",
    "text_content",
    "is_visible",
    "is_hidden",
    "input_value",
    "inner_html",
    "is_checked",
    "is_enabled",
    "is_disabled",
    "is_editable",
    "all_inner_texts",
    "all_text_contents",
}


def _text(node: ast.AST, constants: dict[str, str]) -> str:
    """The JavaScript text of a wait's first argument: strings, f-strings' literal parts,
    concatenations and module-level string constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v, constants) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left, constants) + _text(node.right, constants)
    if isinstance(node, ast.Name):
        return constants.get(node.id, "")
    return ""


def unguarded_waits(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    constants = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in WAITS
            and node.args
        ):
            for m in UNGUARDED.finditer(_text(node.args[0], constants)):
                found.append((node.lineno, m.group(0)))
    for node in tree.body:  # watchers kept in module constants, wherever they are used
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and WATCHER.search(node.value.value)
        ):
            for m in UNGUARDED.finditer(node.value.value):
                found.append((node.lineno, m.group(0)))
    return sorted(set(found))


def test_the_check_finds_an_unguarded_read_and_passes_a_guarded_one() -> None:
    bad = (
        "page.wait_for_function(\"() => document.querySelector('#m input').value === 'a'\")\n"
        "JS = \"() => document.getElementById('n').getBoundingClientRect().top < 4\"\n"
        "page.wait_for_function(JS)\n"
    )
    good = (
        "page.wait_for_function(\"() => document.querySelector('#m input')?.value === 'a'\")\n"
        "page.wait_for_function(\"document.querySelectorAll('#t tr').length === 2\")\n"
        "page.evaluate(\"document.querySelector('#m').value\")\n"  # after a wait: not a wait
    )
    watcher = (
        "WATCH = \"new MutationObserver(() => { x = document.querySelector('#s').innerText })\"\n"
        "ctx.add_init_script(\"setTimeout(() => document.getElementById('n').click(), 0)\")\n"
    )
    assert [line for line, _ in unguarded_waits(bad)] == [1, 3]
    assert [line for line, _ in unguarded_waits(watcher)] == [1, 2]
    assert unguarded_waits(good) == []


def _found(paths: list[Path], check: Callable[[str], list[tuple[int, str]]]) -> str:
    """What ``check`` finds in the files, a line each (path:line: text)."""
    return "\n".join(
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in paths
        for line, text in check(path.read_text(encoding="utf-8"))
    )


def test_no_browser_wait_reads_a_possibly_missing_element() -> None:
    assert not (found := _found(SOURCES, unguarded_waits)), found


def _reads_the_page(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and (
            (node.func.attr in PAGE_READS and not node.args)
            or (node.func.attr == "get_attribute" and len(node.args) + len(node.keywords) == 1)
        )
    )


def page_reads_in_asserts(source: str) -> list[tuple[int, str]]:
    """The ``assert`` statements (line, text) that call a read of the page."""
    return sorted(
        (node.lineno, ast.unparse(node))
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assert) and any(_reads_the_page(n) for n in ast.walk(node))
    )


def test_the_check_finds_an_assert_on_a_page_read_and_passes_expect() -> None:
    bad = (
        'page.wait_for_selector("#label")\n'
        'assert page.locator("#chart .js-plotly-plot").count() == 1\n'
        'assert "x" in page.locator("#notes").inner_text()\n'
        "assert (\n"
        "    not panel.is_visible()\n"
        ")\n"
        'assert "c" in (loc.get_attribute("class") or "")\n'
        'assert page.locator("#a input").input_value().startswith("g")\n'
        'assert "b" in page.locator("li").all_inner_texts()\n'
        'assert loc.get_attribute(name="title") == "t"\n'
    )
    good = (
        'expect(page.locator("#chart .js-plotly-plot")).to_have_count(1)\n'
        'expect(page.locator("#notes")).to_contain_text("x")\n'
        "expect(panel).to_be_hidden()\n"
        'expect(loc).to_have_class(re.compile(r"\\bc\\b"))\n'
        'assert asked.count("/ui/assets/x.js") == 1\n'  # a Python list's count: no page read
        'assert text.count("pinned") == 1\n'
        'n = page.locator(".tok").count()\n'  # not an assert
    )
    assert [line for line, _ in page_reads_in_asserts(bad)] == [2, 3, 4, 7, 8, 9, 10]
    assert page_reads_in_asserts(good) == []


def test_no_browser_test_asserts_on_a_read_made_at_once() -> None:
    found = _found(BROWSER_TESTS, page_reads_in_asserts)
    assert not found, "use playwright's expect:\n" + found
