"""Browser waits never read a property of an element that may not exist yet.

Playwright's ``wait_for_function`` stops at the first exception its predicate throws, so
``document.querySelector('#x').value`` fails the test with "Cannot read properties of null"
whenever the page has not drawn ``#x`` yet (a loaded machine, a re-rendered component), instead
of waiting for it. Every wait in ``tests/browser`` reads such an element through ``?.`` (or
checks it first). This reads the waits' JavaScript from the test files (no browser)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

BROWSER = Path(__file__).resolve().parent / "browser"
# a property read straight off querySelector / getElementById / closest, which return null
UNGUARDED = re.compile(r"\b(?:querySelector|getElementById|closest)\((?:[^()]|\([^()]*\))*\)\s*\.")


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
            and node.func.attr == "wait_for_function"
            and node.args
        ):
            for m in UNGUARDED.finditer(_text(node.args[0], constants)):
                found.append((node.lineno, m.group(0)))
    return found


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
    assert [line for line, _ in unguarded_waits(bad)] == [1, 3]
    assert unguarded_waits(good) == []


def test_no_browser_wait_reads_a_possibly_missing_element() -> None:
    problems = [
        f"{path.name}:{line}: {text}"
        for path in sorted(BROWSER.glob("*.py"))
        for line, text in unguarded_waits(path.read_text(encoding="utf-8"))
    ]
    assert not problems, "\n".join(problems)
