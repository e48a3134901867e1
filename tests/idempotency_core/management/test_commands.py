"""The project's own management commands, as docs/operations.md names them."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from idempotency_core.intake.sources import source_for_working_api_key
from idempotency_core.keys import api_key_digest
from idempotency_core.models import AuditEntry, Source, SourceApiKey

pytestmark = pytest.mark.django_db


def test_create_source_prints_a_new_key_alone_on_its_last_line():
    out = io.StringIO()
    call_command("create_source", "shop", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    assert key.startswith("ofk_") and " " not in key
    assert source_for_working_api_key(key) == Source.objects.get(name="shop")


@pytest.mark.parametrize(
    "options", [{}, {"profile": "generic", "secret": ["a-new-secret-long-enough-for-hmac-sha256"]}]
)
def test_create_source_refuses_an_existing_source_and_changes_nothing(options):
    call_command("create_source", "shop", stdout=io.StringIO())
    before = _source_state("shop")
    with pytest.raises(CommandError, match=r"exists; nothing was changed.*rotate_key shop"):
        call_command("create_source", "shop", stdout=io.StringIO(), **options)
    assert _source_state("shop") == before


def test_a_refused_profile_leaves_no_half_made_source():
    with pytest.raises(CommandError, match="at least 32 characters"):
        call_command("create_source", "hook", profile="generic", secret=["short"])
    assert not Source.objects.filter(name="hook").exists()


def test_rotate_key_ends_the_old_keys_after_the_overlap_and_prints_the_new_one_last():
    old = _created_key("shop")
    out = io.StringIO()
    call_command("rotate_key", "shop", overlap_seconds=60, stdout=out)
    new = out.getvalue().strip().splitlines()[-1]
    assert (
        new.startswith("ofk_")
        and new != old
        and f"Old key {old[:10]}… works until" in (out.getvalue())
    )
    now = timezone.now()
    shop = Source.objects.get(name="shop")
    assert source_for_working_api_key(old, now=now) == shop
    assert source_for_working_api_key(old, now=now + timedelta(seconds=61)) is None
    assert source_for_working_api_key(new, now=now + timedelta(days=400)) == shop
    # A second rotation does not lengthen the first overlap: a key ending sooner keeps its end.
    call_command("rotate_key", "shop", stdout=io.StringIO())
    assert source_for_working_api_key(old, now=now + timedelta(seconds=61)) is None
    assert source_for_working_api_key(new, now=now + timedelta(seconds=61)) == shop
    first, second = AuditEntry.objects.filter(action="api_key_rotated").order_by("pk")
    assert first.details["new_prefix"] == new[:10] and first.actor_label == "system:rotate_key"
    assert [r["prefix"] for r in first.details["retiring"]] == [old[:10]]
    assert [r["prefix"] for r in second.details["retiring"]] == [old[:10], new[:10]]
    assert new not in str([first.details, second.details])  # prefixes only, never a key


def test_rotate_key_with_no_overlap_ends_the_old_key_at_once():
    old = _created_key("shop")
    call_command("rotate_key", "shop", overlap_seconds=0, stdout=io.StringIO())
    assert source_for_working_api_key(old) is None


def test_rotate_key_refuses_an_unknown_source_or_a_negative_overlap():
    with pytest.raises(CommandError, match="No source is named 'nowhere'"):
        call_command("rotate_key", "nowhere", stdout=io.StringIO())
    _created_key("shop")
    with pytest.raises(CommandError, match="between 0 and"):
        call_command("rotate_key", "shop", overlap_seconds=-1, stdout=io.StringIO())
    assert SourceApiKey.objects.count() == 1


def test_revoke_key_stops_the_key_with_that_prefix_at_once():
    key, other = _created_key("shop"), _created_key("blog")
    out = io.StringIO()
    call_command("revoke_key", key[:10], stdout=out)
    assert "Revoked key" in out.getvalue()
    assert source_for_working_api_key(key) is None
    assert source_for_working_api_key(other) == Source.objects.get(name="blog")
    # Again: nothing to do, said so, not an error. The whole key is accepted as its prefix.
    again = io.StringIO()
    call_command("revoke_key", key, stdout=again)
    assert "already stopped working" in again.getvalue()
    entry = AuditEntry.objects.get(action="api_key_revoked")
    assert entry.details["prefix"] == key[:10] and entry.actor_label == "system:revoke_key"


def test_revoke_key_refuses_an_unknown_or_ambiguous_prefix_and_revokes_nothing():
    shop = Source.objects.get(name=_created_source("shop"))
    blog = Source.objects.get(name=_created_source("blog"))
    # Two keys whose printed prefixes collide (possible, if unlikely, with 6 random characters).
    for source, clear in ((shop, "ofk_same00-one"), (blog, "ofk_same00-two")):
        SourceApiKey.objects.create(source=source, prefix=clear[:10], digest=api_key_digest(clear))
    with pytest.raises(CommandError, match="No API key starts with ofk_nope"):
        call_command("revoke_key", "ofk_nope", stdout=io.StringIO())
    with pytest.raises(CommandError, match="2 working keys start with ofk_same") as refused:
        call_command("revoke_key", "ofk_same", stdout=io.StringIO())
    assert "source 'shop'" in str(refused.value) and "source 'blog'" in str(refused.value)
    for bad in ("", "ofk_\x00", "ofk_é"):
        with pytest.raises(CommandError):
            call_command("revoke_key", bad, stdout=io.StringIO())
    assert not SourceApiKey.objects.filter(revoked_at__isnull=False).exists()
    # The whole key names exactly one of them.
    call_command("revoke_key", "ofk_same00-two", stdout=io.StringIO())
    assert source_for_working_api_key("ofk_same00-two") is None
    assert source_for_working_api_key("ofk_same00-one") == shop


def _created_key(name: str) -> str:
    out = io.StringIO()
    call_command("create_source", name, stdout=out)
    return out.getvalue().strip().splitlines()[-1]


def _created_source(name: str) -> str:
    _created_key(name)
    return name


def _source_state(name: str) -> tuple:
    source = Source.objects.get(name=name)
    keys = list(SourceApiKey.objects.filter(source=source).values_list("digest", "expires_at"))
    secrets = list(source.secrets.values_list("secret", flat=True))
    return (source.profile, source.key_salt, source.pipelines, keys, secrets)


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
