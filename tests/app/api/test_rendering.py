"""Bodies serialised piece by piece are the same JSON as pydantic's one-call dump."""

from __future__ import annotations

import json
from pathlib import Path

from app.api.rendering import json_bytes, json_dict
from app.main import create_app
from app.schemas.analyze_request import AnalyzeRequest
from app.schemas.gradcheck import GradcheckRequest
from app.schemas.sessions import SessionCreateRequest, SessionStepRequest
from tests.app.api_helpers import given_body, make_settings


def _same(model, exclude_unset: bool) -> None:  # noqa: ANN001
    whole = json.loads(model.model_dump_json(exclude_unset=exclude_unset))
    assert json.loads(json_bytes(model, exclude_unset)) == whole
    assert json_dict(model, exclude_unset) == whole


def test_piecewise_json_equals_the_whole_dump(model_root: Path) -> None:
    services = create_app(make_settings(model_root)).state.services
    single = AnalyzeRequest.model_validate(given_body())
    batch = AnalyzeRequest.model_validate(
        {"groups": [{"prompt": "Q:", "answers": [" 85", " 75"], "rewards": [1, 0]}] * 2}
    )
    for req in (single, batch):
        response = services.analysis.run(req)
        _same(response, exclude_unset=True)
        _same(response, exclude_unset=False)
    check = services.gradcheck.run(GradcheckRequest.model_validate(given_body()))
    _same(check, exclude_unset=True)
    sid = services.sessions.create(
        SessionCreateRequest(group_size=2, prompts_per_step=1)
    ).session_id
    step = services.sessions.step(sid, SessionStepRequest(steps=1, include_tokens=True))
    _same(step, exclude_unset=False)
