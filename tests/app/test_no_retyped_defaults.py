"""Each default defined once: no module of ``app/`` or ``gmts_core/`` retypes the literal default
of an analysis knob (``AnalysisConfig``: ratio, scope, temperature, advantage, loss aggregation, top
alternatives) where that knob is set -- a parameter or field of the knob's name, a keyword
argument, a ``.get(name, default)``, a dict entry or a ``field(default=...)``, also under the
trainers' names for it (``gmts_ratio``, ``selection_ratio``). Front ends take the default from the
config (``app.services.catalog.ANALYSIS_DEFAULTS``), the library from ``gmts_core.knobs``
(``DEFAULT_RATIO``, ``DEFAULT_SCOPE``, ``DEFAULT_TEMPERATURE``). Example values of the API
documentation (``examples=``) are illustrations and exempt."""

from __future__ import annotations

import ast
from pathlib import Path

from gmts_core.config import AnalysisConfig
from gmts_core.knobs import knob_default

APP = Path(__file__).resolve().parents[2] / "app"
CORE = APP.parent / "gmts_core"
KNOBS = ("ratio", "scope", "temperature", "advantage", "loss_aggregation", "top_alternatives")
EXEMPT_KEYWORDS = {"examples", "openapi_examples", "json_schema_extra", "example"}
# the OpenAPI page's example bodies: illustrations written out in full
EXEMPT_FILES = {"app/api/routes/examples.py"}
# a knob under another name: the verl plugin's policy_loss.gmts_ratio, TRL's selection_ratio
ALIASES = {"gmts_ratio": "ratio", "selection_ratio": "ratio"}


def _defaults() -> dict[str, object]:
    return {k: knob_default(AnalysisConfig, k) for k in KNOBS}


def _is(node: ast.AST | None, value: object) -> bool:
    return (
        isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value
    )


def retyped(tree: ast.AST, defaults: dict[str, object]) -> list[tuple[int, str]]:
    """(line, knob) of every literal default of a knob set under the knob's name."""
    found: list[tuple[int, str]] = []
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in EXEMPT_KEYWORDS:
            exempt |= {id(n) for n in ast.walk(node.value)}

    def hit(name: str | None, value: ast.AST | None, line: int) -> None:
        name = ALIASES.get(name or "", name)
        if name in defaults and value is not None and id(value) not in exempt:
            if _is(value, defaults[name]):
                found.append((line, name))

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            for arg, default in zip(positional[-len(args.defaults) :], args.defaults, strict=False):
                hit(arg.arg, default, node.lineno)
            for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                hit(arg.arg, default, node.lineno)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            hit(node.target.id, node.value, node.lineno)
            if isinstance(node.value, ast.Call):  # x: float = field(default=0.2, ...)
                for kw in node.value.keywords:
                    if kw.arg == "default":
                        hit(node.target.id, kw.value, node.lineno)
        elif isinstance(node, ast.keyword):
            hit(node.arg, node.value, node.value.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get" and len(node.args) == 2:
                key = node.args[0]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    hit(key.value, node.args[1], node.lineno)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    hit(key.value, value, node.lineno)
    return found


def test_the_rule_finds_each_form() -> None:
    source = (
        "def f(ratio=0.2, *, scope='batch'): pass\n"
        "class C:\n    temperature: float = 1.0\n"
        "g(advantage='grpo')\n"
        "d.get('loss_aggregation', 'token_mean')\n"
        "x = {'top_alternatives': 5}\n"
        "Field(examples=[{'ratio': 0.2}])\n"  # exempt
        "h(ratio=0.3)\n"  # not the default
        "class D:\n    selection_ratio: float = field(default=0.2, metadata={})\n"
        "p.get('gmts_ratio', 0.2)\n"
    )
    defaults = {
        "ratio": 0.2,
        "scope": "batch",
        "temperature": 1.0,
        "advantage": "grpo",
        "loss_aggregation": "token_mean",
        "top_alternatives": 5,
    }
    assert sorted(n for _, n in retyped(ast.parse(source), defaults)) == sorted(
        [*defaults, "ratio", "ratio"]
    )


def test_no_module_of_app_retypes_an_analysis_default() -> None:
    defaults = _defaults()
    problems = [
        f"{path.relative_to(APP.parent)}:{line}: {name} = {defaults[name]!r}"
        for path in sorted(APP.rglob("*.py"))
        if str(path.relative_to(APP.parent)) not in EXEMPT_FILES
        for line, name in retyped(ast.parse(path.read_text(encoding="utf-8")), defaults)
    ]
    assert not problems, "\n".join(problems)


def test_no_module_of_gmts_core_retypes_an_analysis_default() -> None:
    defaults = _defaults()
    problems = [
        f"{path.relative_to(CORE.parent)}:{line}: {name} = {defaults[name]!r}"
        for path in sorted(CORE.rglob("*.py"))
        for line, name in retyped(ast.parse(path.read_text(encoding="utf-8")), defaults)
    ]
    assert not problems, "\n".join(problems)
