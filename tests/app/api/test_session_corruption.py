"""Damaged saved sessions are refused and moved aside, never a 500 (issue 36, item 6).

``gmts serve`` saves sessions; the test kills it, damages each saved session in another way
(a truncated weights file, a zeroed optimizer state, ``meta.json`` truncated, nested 100,000
levels, edited without its checksum; and with a matching checksum: wrong types, ``saved_at``
or the seed out of range, a weights file that is no safetensors file, the tensor files
swapped) and puts junk in the state folder (a FIFO, a FIFO as ``meta.json``, a link to a
device, a plain file, an empty folder). The restarted server starts, answers every damaged
session (GET and step) with a 404 naming the damage, moves its folder to ``.quarantine/``, and
still restores the intact session; after each damaged one ``/healthz`` answers and the server
process's resident memory is within 200 MB of what it was once the intact one was restored.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from gmts_core.experiments.session_state import _meta_digest
from tests.app.api.test_session_restart import KNOBS, serve
from tests.patience import PATIENCE_S

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and POSIX signals")


def _meta(folder: Path) -> dict:
    return dict(json.loads((folder / "meta.json").read_text()))


def _file(folder: Path, part: str) -> Path:
    return folder / _meta(folder)["files"][part]


def _truncate_weights(folder: Path) -> None:
    path = _file(folder, "weights")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _zero_optimizer(folder: Path) -> None:
    path = _file(folder, "optimizer")
    path.write_bytes(bytes(path.stat().st_size))


def _truncate_meta(folder: Path) -> None:
    text = (folder / "meta.json").read_text()
    (folder / "meta.json").write_text(text[: len(text) // 2])


def _edit_meta(folder: Path) -> None:
    meta = _meta(folder)
    meta["steps_done"] = "many"  # wrong type, checksum left as it was
    (folder / "meta.json").write_text(json.dumps(meta))


def _wrong_types_with_checksum(folder: Path) -> None:
    meta = _meta(folder)
    meta["seed"] = "seven"
    meta["history"] = [{"step": "x"}]
    meta["sha256"] = _meta_digest(meta)  # the damage is consistent: only loading finds it
    (folder / "meta.json").write_text(json.dumps(meta))


def _rewrite(folder: Path, meta: dict) -> None:
    """``meta`` written as the session's meta.json with a matching checksum: damage that
    only loading (or a step) can find."""
    meta["sha256"] = _meta_digest(meta)
    (folder / "meta.json").write_text(json.dumps(meta))


def _garbage_weights_with_checksum(folder: Path) -> None:
    meta = _meta(folder)
    name = meta["files"]["weights"]
    data = b'\x08\x00\x00\x00\x00\x00\x00\x00{"a": 1}'  # no safetensors file
    (folder / name).write_bytes(data)
    meta["checksums"][name] = hashlib.sha256(data).hexdigest()
    _rewrite(folder, meta)


def _swapped_tensor_files_with_checksum(folder: Path) -> None:
    meta = _meta(folder)
    files = meta["files"]
    files["weights"], files["optimizer"] = files["optimizer"], files["weights"]
    _rewrite(folder, meta)


def _saved_at_out_of_range(folder: Path) -> None:
    _rewrite(folder, {**_meta(folder), "saved_at": 10**400})  # no float holds it


def _seed_out_of_range(folder: Path) -> None:
    _rewrite(folder, {**_meta(folder), "seed": 2**70})


def _nested_meta(folder: Path) -> None:
    (folder / "meta.json").write_text("[" * 100_000 + "]" * 100_000)


DAMAGE = {
    "truncated weights": _truncate_weights,
    "zeroed optimizer": _zero_optimizer,
    "truncated meta.json": _truncate_meta,
    "edited meta.json": _edit_meta,
    "wrong types, matching checksum": _wrong_types_with_checksum,
    "not safetensors, matching checksum": _garbage_weights_with_checksum,
    "tensor files swapped, matching checksum": _swapped_tensor_files_with_checksum,
    "saved_at out of range, matching checksum": _saved_at_out_of_range,
    "seed out of range, matching checksum": _seed_out_of_range,
    "meta.json nested 100,000 deep": _nested_meta,
}


def _junk(state: Path) -> None:
    os.mkfifo(state / "a-fifo")
    (state / "fifo-meta").mkdir()
    os.mkfifo(state / "fifo-meta" / "meta.json")
    (state / "device-meta").mkdir()
    (state / "device-meta" / "meta.json").symlink_to("/dev/zero")
    (state / "plain-file").write_text("not a session")
    (state / "empty-folder").mkdir()


def test_damaged_sessions_are_quarantined_after_a_restart(
    model_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, log = tmp_path / "state", tmp_path / "serve.log"
    monkeypatch.setenv("GMTS_MAX_SESSIONS_PER_CLIENT", str(len(DAMAGE) + 1))  # one client here
    with serve(model_root, state, log) as (url, proc):
        with httpx.Client(base_url=url, timeout=300) as http:
            ids = {}
            for what in [*DAMAGE, "intact"]:
                r = http.post("/v1/sessions", json=KNOBS)
                assert r.status_code == 201, r.text
                ids[what] = r.json()["session_id"]
            step = http.post(f"/v1/sessions/{ids['intact']}/step", json={"steps": 1})
            assert step.status_code == 200, step.text
        proc.send_signal(signal.SIGKILL)
        proc.wait(PATIENCE_S)
    for what, damage in DAMAGE.items():
        damage(state / ids[what])
    _junk(state)

    with serve(model_root, state, log) as (url, proc):
        server = psutil.Process(proc.pid)
        with httpx.Client(base_url=url, timeout=300) as http:
            assert http.get("/healthz").status_code == 200
            # the intact session first: the model loaded, the server's memory then its start
            intact = http.get(f"/v1/sessions/{ids['intact']}")
            assert intact.status_code == 200, intact.text
            assert intact.json()["steps_done"] == 1
            start_mb = server.memory_info().rss / 2**20
            for what in DAMAGE:
                sid = ids[what]
                for r in (
                    http.get(f"/v1/sessions/{sid}"),
                    http.post(f"/v1/sessions/{sid}/step", json={"steps": 1}),
                    http.get(f"/v1/sessions/{sid}"),
                ):
                    assert r.status_code == 404, (what, r.status_code, r.text)
                    assert "quarantined" in r.json()["error"]["message"], (what, r.text)
                assert not (state / sid).exists(), what
                assert list((state / ".quarantine").glob(f"{sid}-*")), what
                assert http.get("/healthz").status_code == 200
                grown_mb = server.memory_info().rss / 2**20 - start_mb
                print(f"{what}: server RSS {grown_mb:+.0f} MB")  # noqa: T201
                assert grown_mb < 200, what
            again = http.post(f"/v1/sessions/{ids['intact']}/step", json={"steps": 1})
            assert again.status_code == 200, again.text
            # folders with a meta.json that is no regular file were moved aside; other junk
            # (no meta.json at all) is left where it was
            assert not (state / "fifo-meta").exists()
            assert not (state / "device-meta").exists()
            assert (state / "a-fifo").exists() and (state / "plain-file").exists()
    assert "is damaged" in log.read_text()
