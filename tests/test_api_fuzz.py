"""Property-based fuzzing of the HTTP API from its own OpenAPI document (schemathesis).

Every operation gets generated requests, valid and invalid, through the real app over a real
database. Whatever is sent, there is no 5xx. Every status is one the document lists. Every
JSON reply matches its schema. The run is bounded to a fixed number of examples per
operation, with no deadline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from simplefeed.app import create_app, openapi
from simplefeed.service import Simplefeed

DOCS = Path(__file__).resolve().parent.parent / "docs" / "openapi.json"


def test_committed_openapi_document_is_current() -> None:
    assert json.loads(DOCS.read_text()) == openapi.build(), (
        "docs/openapi.json is stale: python -m simplefeed.app.openapi > docs/openapi.json"
    )


@pytest.fixture
def api_schema(core: Simplefeed, token: str) -> Any:
    core.create_feed("orders", page_size=3)
    return schemathesis.openapi.from_wsgi("/openapi.json", create_app(core.settings, core=core))


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@hypothesis.settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
    derandomize=True,
)
def test_api_never_fails_and_matches_its_schema(case: Any, token: str) -> None:
    response = case.call_and_validate(
        # Identity, because the checks read the bodies, and schemathesis does not decode them.
        # A 422's JSON over 256 bytes comes back in br, and gives "Content deserialization
        # error".
        headers={"Authorization": f"Bearer {token}", "Accept-Encoding": "identity"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
    assert response.status_code < 500
