"""The hostile corpus (tests/app/api/hostile_corpus.py) against every registered reader.

Through a live server with the UI on: every target of the registries (run formats, trainer
metrics logs, analysed datasets), each valid and under every mutation, in one run root with
odd names; FIFOs and links also swapped in once the server has read the runs; files
rewritten while they are read. The server starts and stays up; the listings answer and name
the valid runs; every answer is 2xx or a 4xx JSON error naming no server path; nothing
outside the root is read; /healthz answers after each request; the server's resident memory
stays within 200 MB of its start.

In process, the same corpus against every registered run reader's ``open_run`` and step
loads: only the library's own errors (GMTSError), never another exception (a reader's bug).
A reader registered later inherits both; ``test_a_new_reader_inherits_the_corpus`` shows it
with a throwaway reader.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psutil
import pytest

from app.main import create_app
from gmts_core.errors import GMTSError
from gmts_core.runs import RunLimits, open_run
from gmts_core.runs.base import RunFormatError, RunGroup, RunStep, StepRef
from gmts_core.runs.registry import READERS, register_reader
from tests.app.api import hostile_corpus as corpus
from tests.app.api.test_runs_hostile import hostile_settings
from tests.app.api_helpers import LiveServer
from tests.patience import PATIENCE_S

RSS_SLACK_MB = 200


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def all_targets(analysed: Path) -> list[corpus.Target]:
    return corpus.run_targets() + corpus.log_targets() + corpus.analysed_targets(analysed)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("corpus_root")
    outside = tmp_path_factory.mktemp("corpus_outside")
    analysed = corpus.analysed_sample(tmp_path_factory.mktemp("analysed") / "sample")
    cases: list[tuple[corpus.Target, str | None, str, Path]] = []
    for target in all_targets(analysed):
        for mutation in (None, *corpus.BEFORE):
            run_id, victim = corpus.place(target, root, mutation, outside)
            cases.append((target, mutation, run_id, victim))
        for mutation in corpus.AFTER:  # valid now, swapped once the server has read it
            label = f"after-{mutation}"
            run_id, victim = corpus.place(target, root, None, outside, label)
            cases.append((target, label, run_id, victim))
    return {"root": root, "outside": outside, "cases": cases}


@pytest.fixture(scope="module")
def server(world: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = hostile_settings(
        tmp_path_factory.mktemp("models"),
        world["root"],
        ui_enabled=True,
        analysed_query_timeout_s=20.0,
        analysed_queue_wait_s=10.0,
    )
    with LiveServer(create_app(settings), start_timeout_s=300) as live:
        yield live


def _get(client: httpx.Client, url: str, root: Path, start_rss: float) -> httpx.Response:
    model = url.startswith("/v1/runs/") and "/steps/" in url
    resp = client.get(url, params={"model": "tiny-arith"} if model else None)
    corpus.check(resp.text, resp.status_code, root, corpus.json_or_none(resp.text))
    assert client.get("/healthz").status_code == 200
    assert _rss_mb() - start_rss < RSS_SLACK_MB, url
    return resp


def _quoted(run_id: str) -> str:
    return quote(run_id, safe="")


def test_every_reader_passes_the_corpus_through_a_live_server(
    server: LiveServer, world: dict[str, Any]
) -> None:
    root, outside = world["root"], world["outside"]
    with httpx.Client(base_url=server.url, timeout=120) as client:
        start = _rss_mb()
        runs = _get(client, "/v1/runs", root, start).json()["runs"]
        analysed = _get(client, "/v1/analysed-runs", root, start).json()["runs"]
        listed = {r["id"]: r for r in runs} | {r["id"]: r for r in analysed}
        for _target, mutation, run_id, _ in world["cases"]:
            if mutation is None or mutation.startswith("after-"):
                assert run_id in listed, (run_id, sorted(listed)[:5])
        for _target, mutation, _run_id, victim in world["cases"]:  # swaps after the listing
            if mutation is not None and mutation.startswith("after-"):
                corpus.BEFORE[mutation.removeprefix("after-")](victim, outside)
        before = sorted(p.name for p in outside.iterdir())
        for target, mutation, run_id, _victim in world["cases"]:
            for route in target.routes:
                url = route.format(run=_quoted(run_id))
                resp = _get(client, url, root, start)
                if mutation is None:  # the valid copy of every reader's sample is served
                    assert resp.status_code == 200, (url, resp.text[:300])
    # nothing written outside the root, and the server still serves a valid run
    assert sorted(p.name for p in outside.iterdir()) == before


def test_runs_rewritten_while_read_answer_cleanly(
    server: LiveServer, world: dict[str, Any]
) -> None:
    root = world["root"]
    valid = [c for c in world["cases"] if c[1] is None and c[0].name.startswith("run-")]
    stop = threading.Event()

    def churn(victims: list[Path]) -> None:
        saved = {v: v.read_bytes() for v in victims if v.is_file()}
        i = 0
        while not stop.is_set():
            for v, data in saved.items():
                tmp = v.with_name(v.name + ".churn")
                tmp.write_bytes(data if i % 2 else data[: len(data) // 2] + b"\x00garbage")
                tmp.replace(v)
            i += 1
        for v, data in saved.items():
            v.write_bytes(data)

    worker = threading.Thread(target=churn, args=([c[3] for c in valid],), daemon=True)
    worker.start()
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            start = _rss_mb()
            for _ in range(2):
                for target, _, run_id, _ in valid:
                    for route in target.routes:
                        _get(client, route.format(run=_quoted(run_id)), root, start)
    finally:
        stop.set()
        worker.join(timeout=PATIENCE_S)


def corpus_in_process(tmp: Path, formats: list[str] | None = None) -> list[str]:
    """The corpus against every registered run reader, in this process: open_run and the
    first step's load raise nothing but GMTSError. The formats covered."""
    covered = []
    for target in corpus.run_targets(formats=formats):
        fmt = target.name.removeprefix("run-")
        for mutation in corpus.BEFORE:
            root = tmp / f"{fmt}-{mutation}"
            root.mkdir(parents=True)
            run_id, _ = corpus.place(target, root, mutation, tmp)
            limits = RunLimits(root=str(root), max_step_bytes=2_000_000, max_line_bytes=1 << 20)
            try:
                run = open_run(root / run_id, fmt, limits)
                run.step(run.refs[0].step)
            except GMTSError:
                pass
        covered.append(fmt)
    return covered


def test_every_run_reader_raises_only_its_own_errors_in_process(tmp_path: Path) -> None:
    assert corpus_in_process(tmp_path) == READERS.names()


class _ThrowawayReader:
    """A reader of ``rollouts.tsv`` (prompt, completion, reward per line): registered by a
    test only, to show that the corpus covers a reader nobody wrote a test for."""

    name = "throwaway_tsv"
    description = "test only"

    def detect(self, path: Path, limits: RunLimits) -> bool:
        return (path / "rollouts.tsv").is_file()

    def index(self, path: Path, limits: RunLimits) -> list[StepRef]:
        return [StepRef(1, path / "rollouts.tsv", 0, 1, True)]

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        from gmts_core.runs.files import open_run_file

        with open_run_file(ref.path, limits, "max_step_bytes") as f:
            rows = [line.decode().split("\t") for line in f.read().splitlines() if line]
        group = RunGroup(rows[0][0], [r[1] for r in rows], [float(r[2]) for r in rows])
        return RunStep(1, [group], str(ref.path))


class _CarefulThrowawayReader(_ThrowawayReader):
    """The same reader, its file's defects refused as the format's errors."""

    def load(self, ref: StepRef, limits: RunLimits) -> RunStep:
        try:
            return super().load(ref, limits)
        except (UnicodeDecodeError, IndexError, ValueError) as exc:
            raise RunFormatError(ref.path, None, f"not a rollouts.tsv ({exc})") from None


def test_a_new_reader_inherits_the_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    (data / "throwaway_tsv").mkdir(parents=True)
    (data / "throwaway_tsv" / "rollouts.tsv").write_text("Q: 1+1=?\t 2\t1\nQ: 1+1=?\t 3\t0\n")
    monkeypatch.setattr(corpus, "DATA_DIRS", [*corpus.DATA_DIRS, data])
    monkeypatch.setattr(READERS, "_items", dict(READERS._items))  # restored after the test
    register_reader(_ThrowawayReader())
    assert [t.name for t in corpus.run_targets()][-1] == "run-throwaway_tsv"  # a target now
    # the corpus finds its bug (control bytes and invalid UTF-8 crash it) ...
    with pytest.raises(UnicodeDecodeError):
        corpus_in_process(tmp_path / "careless", formats=["throwaway_tsv"])
    # ... and passes it once it refuses bad files with the format's own error
    register_reader(_CarefulThrowawayReader())
    assert corpus_in_process(tmp_path / "careful", ["throwaway_tsv"]) == ["throwaway_tsv"]


def _resign(folder: Path, session_id: str) -> None:
    """meta.json naming ``session_id`` with the checksums of the folder's regular files now:
    the checks then pass and the hostile bytes reach the parser."""
    import json
    import stat

    from gmts_core.experiments.session_state import _meta_digest, _sha256_file

    meta = json.loads((folder / "meta.json").read_text())
    meta["session_id"] = session_id
    for name in meta["checksums"]:
        path = folder / name
        if stat.S_ISREG(path.lstat().st_mode) and path.stat().st_size < (1 << 30):
            meta["checksums"][name] = _sha256_file(path)
    meta["sha256"] = _meta_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta))


SESSION_KNOBS = {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 6}


def test_saved_session_state_passes_the_corpus(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Saved sessions are bytes from outside too (a shared state folder): a session saved by
    the server after a step, copied once per mutation of each of its files, in a state folder
    a new server starts on (UI on). It starts; each session answers 200 (valid) or a clean 4xx;
    none of the server's paths or outside text in any answer; RSS within 200 MB."""
    models = tmp_path_factory.mktemp("models")
    state, outside = tmp_path / "state", tmp_path / "outside"
    state.mkdir()
    outside.mkdir()
    settings = hostile_settings(models, tmp_path / "no-runs", session_state_dir=state)
    with LiveServer(create_app(settings)) as live, httpx.Client(base_url=live.url) as http:
        sid = http.post("/v1/sessions", json=SESSION_KNOBS, timeout=300).json()["session_id"]
        step = http.post(f"/v1/sessions/{sid}/step", json={"steps": 1}, timeout=300)
        assert step.status_code == 200, step.text
    saved = state / sid
    files = sorted(p.relative_to(saved) for p in saved.rglob("*") if p.is_file())
    assert files, "the session saved no files"
    cases: list[tuple[str, str | None]] = [(sid, None)]
    for i, rel in enumerate(files):
        for j, mutation in enumerate(corpus.BEFORE):
            copy = f"{sid[:-6]}{i:02d}{j:04d}"[-len(sid) :]
            shutil.copytree(saved, state / copy, symlinks=True)
            _resign(state / copy, copy)
            victim = state / copy / rel
            if mutation == "folder-link" and victim.parent == state / copy:
                corpus.BEFORE["link-out"](victim, outside)
            else:
                corpus.BEFORE[mutation](victim, outside)
            if rel != Path("meta.json"):  # signed again, as whoever wrote the bytes would
                _resign(state / copy, copy)
            cases.append((copy, f"{rel}:{mutation}"))
    settings = hostile_settings(
        models, tmp_path / "no-runs", session_state_dir=state, ui_enabled=True
    )
    with LiveServer(create_app(settings), start_timeout_s=300) as live:
        with httpx.Client(base_url=live.url, timeout=120) as client:
            start = _rss_mb()
            for session, mutation in cases:
                resp = _get(client, f"/v1/sessions/{session}", state, start)
                if mutation is None:
                    assert resp.status_code == 200, resp.text
                step = client.post(f"/v1/sessions/{session}/step", json={"steps": 1})
                corpus.check(step.text, step.status_code, state, corpus.json_or_none(step.text))
            assert client.get("/healthz").status_code == 200


def test_compare_uploads_pass_the_corpus_in_process(tmp_path: Path) -> None:
    """An uploaded compare.json (the Compare tab's "load compare.json") is bytes from outside:
    each mutation of the corpus, and each top-level field of a real one replaced by a value of
    another JSON type, is refused with the library's own error, never another exception."""
    import json

    from app.services.compare import load_compare_file

    sample = Path(__file__).resolve().parents[3] / "docs" / "compare" / "compare.json"
    load_compare_file(sample)  # the real one loads
    victims = []
    for mutation in ("garbage", "empty", "deep", "long-line", "control-bytes", "parquet-bomb"):
        victim = tmp_path / f"{mutation}.json"
        shutil.copy(sample, victim)
        corpus.BEFORE[mutation](victim, tmp_path)
        victims.append(victim)
    data = json.loads(sample.read_text())
    for key in data:
        for other in ([], {}, "x", 1e308, None, -1, [[[]]], {"a": {"b": []}}):
            victim = tmp_path / f"{key}-{type(other).__name__}-{len(victims)}.json"
            victim.write_text(json.dumps({**data, key: other}))
            victims.append(victim)
    for victim in victims:
        try:
            load_compare_file(victim)
        except GMTSError:
            pass
