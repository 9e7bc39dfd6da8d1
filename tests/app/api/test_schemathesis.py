"""Property-based API test: schemathesis generates requests from /openapi.json (in process).

About 300 requests (schema-valid and schema-invalid bodies) go through the ASGI app itself,
against a tiny random model with tiny limits and the API key on; every response must be a
non-5xx that conforms to the documented schema (status codes, content types, bodies).

The slow variant runs over 2,000 requests: every operation with more examples, against the
server open (no key) and with a key (both with and without the bearer header); the requests
without the key (401 before the body is read) take the larger share, so it fits in minutes.

``positive_data_acceptance`` is left out: a schema-valid body can still break a cross-field
rule JSON Schema cannot state (prompt xor groups, a reward rule or rewards, one reward per
answer) or a server limit (413), and those are rightly refused. A 413 is a refusal too for a
schema-invalid body (a list past its ``maxItems`` is past the body limit first).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from app.main import create_app
from tests.app.api_helpers import make_settings

KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# per POST/DELETE route of this issue (/v1/analyze*); other routes (sessions) get a quarter
EXAMPLES = {GenerationMode.POSITIVE: 60, GenerationMode.NEGATIVE: 30}


def _fuzz_settings(model_root: Path, api_key: str | None) -> Any:
    return make_settings(
        model_root,
        max_new_tokens=4,
        max_answers=4,
        max_groups=2,
        max_total_tokens=256,
        max_prompt_chars=200,
        max_answer_chars=200,
        max_top_alternatives=3,
        max_queued_jobs=32,
        api_key=api_key,
        reward_budget_s=1.0,
        key_failures_per_minute=1_000_000,  # fuzz the routes, not the wrong-key limit
    )


@pytest.fixture(scope="module")
def fuzz_app(model_root: Path) -> FastAPI:
    return create_app(_fuzz_settings(model_root, KEY))


def _fuzz(
    operation: schemathesis.schemas.APIOperation,
    mode: GenerationMode,
    n: int,
    headers: dict[str, str] | None = AUTH,
) -> Counter:
    statuses: Counter = Counter()

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        response = case.call(headers=headers)
        statuses[response.status_code] += 1
        assert response.status_code < 500, (case.body, response.text)
        excluded = [positive_data_acceptance]
        if response.status_code == 413:  # a body over the server's limit: refused, as it must be
            excluded.append(negative_data_rejection)
        case.validate_response(response, headers=headers, excluded_checks=excluded)

    try:
        run()
    except Unsatisfiable:  # e.g. string path parameters: nothing schemathesis can make invalid
        if mode is not GenerationMode.NEGATIVE:
            raise
    return statuses


def test_generated_requests_never_get_a_5xx(fuzz_app: FastAPI) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    total: Counter = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() == "GET":  # no inputs: a few calls suffice
            total += _fuzz(operation, GenerationMode.POSITIVE, 3)
            continue
        ours = operation.path.startswith("/v1/analyze")
        for mode, n in EXAMPLES.items():
            total += _fuzz(operation, mode, n if ours else max(n // 4, 5))
    assert sum(total.values()) >= 250, total
    assert total[200] > 0, total  # some generated analyses really ran


# the requests that reach the model (open server; keyed server with the key) cost most; those
# without the key are answered 401 before their body is read, so they take the larger share
SLOW_EXAMPLES = {GenerationMode.POSITIVE: 40, GenerationMode.NEGATIVE: 20}
KEYED_EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 6}
NO_KEY_EXAMPLES = {GenerationMode.POSITIVE: 120, GenerationMode.NEGATIVE: 60}


def _fuzz_all(
    app: FastAPI, headers: dict[str, str] | None, examples: dict[GenerationMode, int]
) -> Counter:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    total: Counter = Counter()
    gets = max(examples[GenerationMode.POSITIVE] // 6, 2)
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() == "GET":
            total += _fuzz(operation, GenerationMode.POSITIVE, gets, headers)
            if operation.path_parameters:  # nothing to make invalid otherwise
                total += _fuzz(operation, GenerationMode.NEGATIVE, gets, headers)
            continue
        for mode, n in examples.items():
            total += _fuzz(operation, mode, n, headers)
    return total


@pytest.mark.slow
def test_over_2000_generated_requests_open_and_with_a_key_never_get_a_5xx(
    model_root: Path,
) -> None:
    open_app = create_app(_fuzz_settings(model_root, None))
    keyed_app = create_app(_fuzz_settings(model_root, KEY))
    total = _fuzz_all(open_app, None, SLOW_EXAMPLES) + _fuzz_all(keyed_app, AUTH, KEYED_EXAMPLES)
    # every /v1 request without the key: 401 (and 429 once over the wrong-key limit, which is
    # set out of reach here)
    missing_key = _fuzz_all(keyed_app, None, NO_KEY_EXAMPLES)
    assert sum(total.values()) + sum(missing_key.values()) >= 2000, (total, missing_key)
    assert total[200] > 0 and missing_key[401] > 0, (total, missing_key)
    assert all(status < 500 for status in (total + missing_key)), (total, missing_key)
