"""The project's own management commands, as CONTRACT.md names them."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from idempotency_core.intake.sources import source_for_api_key
from idempotency_core.models import Source

pytestmark = pytest.mark.django_db


def test_create_source_prints_a_new_key_alone_on_its_last_line():
    out = io.StringIO()
    call_command("create_source", "shop", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    assert key.startswith("ofk_") and " " not in key
    assert source_for_api_key(key) == Source.objects.get(name="shop")
    # Again: the source is found, not duplicated, and another key is issued.
    again = io.StringIO()
    call_command("create_source", "shop", stdout=again)
    second = again.getvalue().strip().splitlines()[-1]
    assert second != key and Source.objects.filter(name="shop").count() == 1
    assert source_for_api_key(key) == source_for_api_key(second)


def test_demo_setup_prints_credentials_once():
    first = io.StringIO()
    call_command("demo_setup", stdout=first)
    assert "API key: ofk_" in first.getvalue() and "password:" in first.getvalue()
    second = io.StringIO()
    call_command("demo_setup", stdout=second)
    assert "ofk_" not in second.getvalue() and "password:" not in second.getvalue()


def test_create_source_sets_a_pipeline_or_refuses_a_broken_one():
    out = io.StringIO()
    call_command(
        "create_source", "newsletter", pipeline="create_enquiry,send_confirmation", stdout=out
    )
    assert "Pipeline: create_enquiry -> send_confirmation" in out.getvalue()
    assert Source.objects.get(name="newsletter").pipelines == {
        "*": ["create_enquiry", "send_confirmation"]
    }
    with pytest.raises(CommandError, match="needs create_enquiry before it"):
        call_command("create_source", "broken", pipeline="assign_task", stdout=io.StringIO())
    assert not Source.objects.filter(name="broken").exists()
