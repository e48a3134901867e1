"""The public schema (/api/schema/) documents the hooks: paths, headers, answers.

Read as a sender's tooling reads it, over HTTP, and loaded by schemathesis (which
refuses a schema it cannot resolve), so a broken reference fails here too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from django.test import Client

from idempotency_core.intake.senders.profiles import PRESETS

pytestmark = pytest.mark.django_db

ANSWERS = {"200", "202", "400", "401", "413", "429", "503"}


@pytest.fixture
def schema() -> dict[str, Any]:
    response = Client().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    document: dict[str, Any] = json.loads(response.content)
    return document


def test_both_hook_paths_are_documented_with_their_answers(schema):
    signed = schema["paths"]["/hooks/{source}/"]["post"]
    by_token = schema["paths"]["/hooks/{source}/t/{token}/"]["post"]
    assert set(signed["responses"]) >= ANSWERS
    assert ANSWERS | {"303"} <= set(by_token["responses"])
    assert signed["security"] == [] and by_token["security"] == []
    assert "Retry-After" in signed["responses"]["429"]["headers"]
    assert "Retry-After" in signed["responses"]["503"]["headers"]
    assert "Location" in by_token["responses"]["303"]["headers"]
    # The one 401, the same for an unknown source, is written out.
    assert '"code": "unauthorized"' in signed["responses"]["401"]["description"]
    assert "/hooks/{source}/t/{token}/form.js" in schema["paths"]


def test_each_profile_and_its_headers_are_named(schema):
    signed = schema["paths"]["/hooks/{source}/"]["post"]
    by_token = schema["paths"]["/hooks/{source}/t/{token}/"]["post"]
    headers = {p["name"] for p in signed["parameters"] if p["in"] == "header"}
    for name, profile in PRESETS.items():
        operation = signed if profile.signs else by_token
        assert f"`{name}`" in operation["description"], name
        if profile.signature is not None:
            assert profile.signature.header in headers, name
            assert profile.signature.header in signed["description"], name
            if profile.signature.timestamp_header:
                assert profile.signature.timestamp_header in headers, name
    assert "Idempotency-Key" in headers  # generic's key
    assert "within 300 s" in signed["description"]
    assert "Onefold-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256" in signed["description"]


def test_the_schema_still_resolves_and_keeps_the_api(schema):
    assert "/api/v1/submissions/" in schema["paths"]
    loaded = schemathesis.openapi.from_dict(schema)
    operations = [result.ok() for result in loaded.get_all_operations()]
    labels = {op.label for op in operations}
    assert "POST /hooks/{source}/" in labels
    assert "POST /hooks/{source}/t/{token}/" in labels
    assert "POST /api/v1/submissions/" in labels
