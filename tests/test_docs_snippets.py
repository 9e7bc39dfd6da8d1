"""Every fenced code block of README.md and docs/ runs as written (#38: docs that run).

Each page's blocks run in order, as a reader follows the page, in one scratch folder of the
page's own (the checkout's ``.venv`` and ``examples/`` linked into it, everything a block writes
stays there), on CPU, offline (``HF_HUB_OFFLINE``), with the bundled model: ``bash``/``sh``
blocks under ``bash -e -o pipefail`` with the checkout's ``.venv/bin`` first on PATH,
``python`` blocks with the checkout's Python, ``console`` blocks' ``$ `` lines as bash. A
non-zero exit fails the block's test.

A block that is not a command is fenced as one of :data:`NOT_COMMANDS` (``text``: an output
sample, a layout, configuration lines). Anything else needs a marker, an HTML comment on the
last non-blank line before the fence (invisible on the site), with any of:

``<!-- snippet: skip reason="needs a GPU" -->``
    not run; the test is skipped with that reason (a GPU, the network, Docker, a long
    measurement, a server that runs until stopped).
``<!-- snippet: tested-by="tests/app/api/test_readme_curl.py" -->``
    run as written by that test, which reads this page; skipped here with that reason.
``<!-- snippet: needs="outputs/trl-gmts" -->``
    the block reads what :data:`NEEDS` names: a file of the checkout, or what an earlier
    step of the docs writes (copied from that page's folder once it has run).
``<!-- snippet: from="--steps 20" to="--steps 1 --seeds 1" reason="..." -->``
    run with each ``from`` text replaced by its ``to`` (the documented small flags of a long
    command); ``reason`` says what the full command costs.
``<!-- snippet: server -->``
    the block talks to a server: the test starts ``gmts serve`` on a free 127.0.0.1 port
    (the UI off) where the block's ``make serve`` / ``gmts serve`` line stands, with that
    line's environment and options, points ``127.0.0.1:8000`` / ``localhost:8000`` at it, and
    makes ``curl`` fail on an HTTP error (``--fail-with-body``).

A block with an unknown or missing language, an unknown marker, a ``skip`` without a reason, a
``from`` its block does not contain, or a ``tested-by`` test that does not read the page fails
:func:`test_every_block_is_run_or_marked`, so nothing is skipped silently.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.patience import PATIENCE_S, patient_env

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = {"bash", "sh", "shell", "console", "python", "py"}
NOT_COMMANDS = {"text", "json", "yaml", "toml", "csv", "ini"}
LINKED = (".venv", "examples")  # the checkout's, linked into every scratch folder
# what a `needs` marker may name: a file of the checkout, or (page, text of the block that
# writes it): that page runs up to that block, and the path is copied from its folder
NEEDS: dict[str, Path | tuple[str, str]] = {
    "outputs/trl-gmts": ("docs/first-five-minutes.md", "examples/train_trl_gmts.py"),
    "rollouts.jsonl": ROOT / "tests" / "data" / "runs" / "run.jsonl",
}
KEYS = {"skip", "reason", "tested-by", "needs", "from", "to", "server"}
MARKER = re.compile(r"^<!--\s*snippet:(.*?)-->\s*$")
TOKEN = re.compile(r'([\w-]+)(?:="([^"]*)")?')
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
SERVER_LINE = re.compile(
    r"^((?:[A-Z_][A-Z0-9_]*=\S+\s+)*)(?:make serve|(?:\.venv/bin/)?gmts serve)"
    r"((?:\s+[^\s#&]+)*)\s*&?\s*(?:#.*)?$"
)


@dataclass
class Block:
    page: str  # relative to the checkout
    line: int  # of the opening fence
    lang: str
    code: str
    marker: list[tuple[str, str | None]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.marker if k == key), None)

    def replacements(self) -> list[tuple[str, str]]:
        """The marker's (from, to) pairs, in order."""
        sources = [v or "" for k, v in self.marker if k == "from"]
        targets = [v or "" for k, v in self.marker if k == "to"]
        return list(zip(sources, targets, strict=True))

    def has(self, key: str) -> bool:
        return any(k == key for k, _ in self.marker)

    @property
    def not_run(self) -> str | None:
        """Why the block does not run here, or None."""
        if self.has("skip"):
            return self.get("reason")
        if self.has("tested-by"):
            return f"run as written by {self.get('tested-by')}"
        return None


def parse(page: Path, root: Path = ROOT) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        code = "\n".join(ln[len(indent) :] for ln in lines[i + 1 : end]) + "\n"
        before = [ln.strip() for ln in lines[:i] if ln.strip()]
        marker = MARKER.match(before[-1]) if before else None
        tokens = [(k, v) for k, v in TOKEN.findall(marker.group(1))] if marker else []
        rel = page.relative_to(root).as_posix()
        blocks.append(Block(rel, i + 1, lang.lower(), code, [(k, v or None) for k, v in tokens]))
        i = end + 1
    return blocks


BLOCKS = [b for page in PAGES for b in parse(page)]
COMMANDS = [b for b in BLOCKS if b.lang not in NOT_COMMANDS]


def problems(block: Block) -> list[str]:
    """What is wrong with a block's language or marker (empty: it runs or is marked)."""
    found = []
    if block.lang not in RUNNABLE | NOT_COMMANDS:
        found.append(
            f"language {block.lang or '(none)'!r}: fence it as one of {sorted(RUNNABLE)} to run "
            f"it, or as one of {sorted(NOT_COMMANDS)} if it is not a command"
        )
    keys = [k for k, _ in block.marker]
    found += [f"unknown marker key {k!r}" for k in keys if k not in KEYS]
    if block.has("skip") and not block.get("reason"):
        found.append('skip needs a reason="..."')
    if block.has("tested-by"):
        test = ROOT / (block.get("tested-by") or "")
        if not test.is_file() or Path(block.page).name not in test.read_text(encoding="utf-8"):
            found.append(f"tested-by: {test} is not a test that reads {block.page}")
    sources = [v for k, v in block.marker if k == "from"]
    if len(sources) != len([v for k, v in block.marker if k == "to"]):
        found.append("every from= needs its to=")
    found += [f"from={s!r} is not in the block" for s in sources if not s or s not in block.code]
    if sources and not block.get("reason"):
        found.append('from/to needs a reason="..." (what the full command costs)')
    needs = block.get("needs")
    if needs is not None and needs not in NEEDS:
        found.append(f"needs={needs!r}: not one of {sorted(NEEDS)}")
    if block.has("server") and block.lang not in {"bash", "sh", "shell"}:
        found.append("a server block is a bash block")
    return found


def test_every_block_is_run_or_marked() -> None:
    bad = {b.id: p for b in BLOCKS if (p := problems(b))}
    assert not bad, bad
    counts = Counter(
        "not a command" if b.lang in NOT_COMMANDS else "skipped" if b.not_run else "run"
        for b in BLOCKS
    )
    # the count the issue asks for, in -rA / -s output: blocks run, skipped (with reasons)
    print(f"docs blocks: {dict(counts)}")
    for b in COMMANDS:
        if b.not_run:
            print(f"  skipped {b.id}: {b.not_run}")
    assert counts["run"] >= 10  # the runnable heart of the docs stays runnable


def test_a_block_that_would_be_skipped_silently_is_a_problem(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```\nls\n```\n\n<!-- snippet: skip -->\n```bash\nls\n```\n\n"
        '<!-- snippet: skipp reason="typo" -->\n```bash\nls\n```\n\n'
        '<!-- snippet: from="--steps 20" to="--steps 1" reason="long" -->\n```bash\nls\n```\n\n'
        '<!-- snippet: skip reason="needs a GPU" -->\n```bash\nnvidia-smi\n```\n\n'
        "```text\nan output sample\n```\n",
        encoding="utf-8",
    )
    blocks = parse(page, root=tmp_path)
    found = [problems(b) for b in blocks]
    assert "language '(none)'" in found[0][0]
    assert found[1] == ['skip needs a reason="..."']
    assert found[2] == ["unknown marker key 'skipp'"]
    assert found[3] == ["from='--steps 20' is not in the block"]
    assert found[4] == found[5] == []
    assert blocks[4].not_run == "needs a GPU" and blocks[5].lang in NOT_COMMANDS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def snippet_env(native_cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",  # a busy 2-core machine: one thread per process is fastest
        "NO_COLOR": "1",
        # the blocks' compiled kernels (gmts native build --force too) stay in the session's
        # scratch, not in the user's cache, which other processes may be loading
        "GMTS_NATIVE_CACHE": str(native_cache),
        **patient_env(),  # the servers' time limits out of a loaded machine's way
    }


class Server:
    """``gmts serve`` on a free port in ``folder``, until :meth:`stop`; ready once uvicorn says
    it is running on its log (read by a thread, so the pipe never fills). That line comes after
    the socket is bound and listening; "Application startup complete" comes before it, and a
    block started on that one can find the port closed (curl exit 7, seen on a loaded machine)."""

    def __init__(self, folder: Path, line: str, env: dict[str, str]) -> None:
        m = SERVER_LINE.match(line.strip())
        assert m, line
        self.port = free_port()
        env = {**env, **dict(kv.split("=", 1) for kv in m.group(1).split())}
        env["GMTS_UI_ENABLED"] = "0"  # the blocks call the API; the UI's startup is not needed
        cmd = [str(ROOT / ".venv/bin/gmts"), "serve", *shlex.split(m.group(2))]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.log: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        self.ready.wait(timeout=300)
        assert self.proc.poll() is None, "gmts serve stopped:\n" + "".join(self.log)
        assert self.ready.is_set(), "gmts serve did not start:\n" + "".join(self.log)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)
            if "Uvicorn running on" in line:
                self.ready.set()
        self.ready.set()  # ended: the caller sees the exit

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=PATIENCE_S)


@dataclass
class Result:
    returncode: int
    output: str


class Runner:
    """Runs each page's blocks in order, each block once, in the page's own scratch folder."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.folders: dict[str, Path] = {}
        self.results: dict[str, Result] = {}
        self.env = snippet_env(factory.mktemp("native-cache"))

    def folder(self, page: str) -> Path:
        if page not in self.folders:
            folder = self.factory.mktemp(re.sub(r"\W+", "-", page))
            for name in LINKED:
                (folder / name).symlink_to(ROOT / name)
            self.folders[page] = folder
        return self.folders[page]

    def result(self, block: Block) -> Result:
        for b in COMMANDS:  # the page's earlier blocks first, as a reader runs them
            if b.page == block.page and b.line <= block.line and not b.not_run:
                if b.id not in self.results:
                    self.results[b.id] = self._run(b)
        return self.results[block.id]

    def provide(self, needs: str, folder: Path) -> None:
        target = folder / needs
        if target.exists():
            return
        source = NEEDS[needs]
        if isinstance(source, tuple):  # what a step of the docs writes
            page, text = source
            writer = next(b for b in COMMANDS if b.page == page and text in b.code)
            done = self.result(writer)
            assert done.returncode == 0, f"{writer.id}, which writes {needs}, failed"
            source = self.folder(page) / needs
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy(source, target)

    def _run(self, block: Block) -> Result:
        folder = self.folder(block.page)
        if needs := block.get("needs"):
            self.provide(needs, folder)
        code = block.code
        for old, new in block.replacements():
            code = code.replace(old, new)
        name = f"block_{block.line}"
        if block.lang in {"python", "py"}:
            (folder / f"{name}.py").write_text(code, encoding="utf-8")
            return self._exec([sys.executable, f"{name}.py"], folder)
        if block.lang == "console":
            code = "".join(ln[2:] + "\n" for ln in code.splitlines() if ln.startswith("$ "))
        if not block.has("server"):
            return self._bash(code, folder, name)
        lines = code.splitlines()
        at = next((i for i, ln in enumerate(lines) if SERVER_LINE.match(ln.strip())), None)
        before, after = (lines[:at], lines[at + 1 :]) if at is not None else ([], lines)
        if before:
            first = self._bash("\n".join(before) + "\n", folder, f"{name}_before_server")
            if first.returncode:
                return first
        server = Server(folder, lines[at] if at is not None else "gmts serve", self.env)
        try:
            rest = "\n".join(after) + "\n"
            for host in ("127.0.0.1:8000", "localhost:8000"):
                rest = rest.replace(host, f"127.0.0.1:{server.port}")
            rest = 'curl() { command curl --fail-with-body "$@"; }\n' + rest
            done = self._bash(rest, folder, name)
        finally:
            server.stop()
        return Result(done.returncode, done.output + "\n--- server log ---\n" + "".join(server.log))

    def _bash(self, code: str, folder: Path, name: str) -> Result:
        (folder / f"{name}.sh").write_text("set -e -o pipefail\n" + code, encoding="utf-8")
        return self._exec(["bash", f"{name}.sh"], folder)

    def _exec(self, cmd: list[str], folder: Path) -> Result:
        proc = subprocess.run(
            cmd,
            cwd=folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=900,
        )
        return Result(proc.returncode, proc.stdout)


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Runner:
    return Runner(tmp_path_factory)


@pytest.mark.slow  # every runnable block of the docs: a few minutes on 2 cores
@pytest.mark.parametrize("block", COMMANDS, ids=[b.id for b in COMMANDS])
def test_block_runs(block: Block, runner: Runner) -> None:
    if problems(block):
        pytest.fail(f"{block.id}: {problems(block)} (see test_every_block_is_run_or_marked)")
    if block.not_run:
        pytest.skip(block.not_run)
    result = runner.result(block)
    assert result.returncode == 0, (
        f"{block.id} exited {result.returncode}:\n{result.output[-6000:]}"
    )
