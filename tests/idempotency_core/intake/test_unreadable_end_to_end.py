"""Unreadable deliveries and contacts without email, on real parts: the deliveries
over HTTP to gunicorn, a django-q2 cluster doing the work, the sandbox CRM and SMTP
sink counting what arrives.

test_unreadable.py proves the decisions in process; this proves that a
delivery kept unreadable does no work until its map is corrected, then becomes
exactly one record and one task under its original key (the confirmation skipped:
no address), once however often the map is applied or the sender repeats it; and
that a sample without its email address, and Jotform's real delivery of a form
without an email field, each end as one record, one task, no email.
"""

from __future__ import annotations

import signal
import time
from dataclasses import replace
from datetime import timedelta
from io import StringIO

import httpx
import pytest
from django.core.management import call_command
from django.utils import timezone

from idempotency_core.execution.confirmations import NO_ADDRESS
from idempotency_core.intake.ingest import event_status
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import Event, Operation, ReviewCase, Source
from tests.support.processes import Sandbox, wait_for
from tests.support.senders import (
    ANOTHER_FORMS_MAP,
    SAMPLES,
    TUTORING_MAP,
    Sample,
    jotform_captured_tutoring,
    jotform_tutoring,
    sample_without_contact,
    signed_headers,
)

pytestmark = [
    pytest.mark.slow,
    # The cluster and gunicorn commit for real.
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SECRET = "an-end-to-end-signing-secret-long-enough-for-hmac"
# How long a delivery is given to (wrongly) start any work before the counts are read.
STRAY_WORK_SECONDS = 2.0


def hook_source(profile: str, name: str, overrides: dict | None = None) -> tuple[Source, str]:
    source, _ = source_get_or_create(name=name)
    path = source_hook_configure(source=source, profile=profile, secrets=[SECRET]).path
    if overrides is not None:
        source.profile_overrides = overrides
        source.save(update_fields=["profile_overrides"])
    return source, path


def post(client: httpx.Client, base: str, path: str, sample: Sample) -> httpx.Response:
    url = base + path
    return client.post(url, content=sample.body, headers=signed_headers(sample, SECRET, url))


def counts(sandbox: Sandbox) -> tuple[int, int, int]:
    stats = sandbox.stats()
    return stats["records"], stats["tasks"], stats["messages"]


def wait_done(event_id: str) -> dict[str, str]:
    def done() -> bool:
        statuses = list(
            Operation.objects.filter(event_id=event_id).values_list("status", flat=True)
        )
        return event_status(statuses) == "completed"

    wait_for(done, timeout=60, interval=0.2, what="the event's operations")
    return dict(Operation.objects.filter(event_id=event_id).values_list("step", "status"))


def remap(source: Source) -> str:
    out = StringIO()
    since = (timezone.now() - timedelta(days=1)).date().isoformat()
    call_command("remap", "--source", source.name, "--since", since, stdout=out)
    return out.getvalue()


COMPLETED_WITHOUT_EMAIL = {
    "create_enquiry": "succeeded",
    "assign_task": "succeeded",
    "send_confirmation": "cancelled",
}


def test_unreadable_then_corrected_and_without_email_over_real_parts(
    sandbox, web_server, qcluster_factory
):
    cluster = qcluster_factory()
    base = web_server.url
    with httpx.Client(timeout=30) as client:
        # A sample without its email address: one record, one task, no email.
        _, tally_path = hook_source("tally", "e2e-tally-no-email")
        answer = post(
            client, base, tally_path, sample_without_contact(SAMPLES["tally"], everything=False)
        )
        assert answer.status_code == 200, answer.text
        assert wait_done(answer.json()["event_id"]) == COMPLETED_WITHOUT_EMAIL
        assert counts(sandbox) == (1, 1, 0)

        # The captured Jotform delivery, under a map that cannot read it: kept, no work.
        sample = jotform_tutoring()
        jotform, path = hook_source("jotform", "e2e-jotform-tutoring", ANOTHER_FORMS_MAP)
        first = post(client, base, path, sample)
        assert first.status_code == 202, first.text
        event_id = first.json()["event_id"]
        assert first.json() == {"event_id": event_id, "status": "needs_review"}
        time.sleep(STRAY_WORK_SECONDS)
        assert counts(sandbox) == (1, 1, 0)
        case = ReviewCase.objects.get(event_id=event_id)
        assert (case.kind, case.status) == ("unreadable_submission", "open")

        # The corrected map, applied: the cluster runs it under its original key.
        jotform.profile_overrides = TUTORING_MAP
        jotform.save(update_fields=["profile_overrides"])
        assert "processed, first step queued" in remap(jotform)
        assert wait_done(event_id) == COMPLETED_WITHOUT_EMAIL
        assert counts(sandbox) == (2, 2, 0)
        event = Event.objects.get(pk=event_id)
        assert event.key == "jotform:251034567890123:6120418830113579246"
        enquiry = event.operations.get(step="create_enquiry")
        (record,) = sandbox.client.get("/crm/records", params={"external_ref": enquiry.key}).json()[
            "results"
        ]
        assert record["name"] == "Ada Lovelace"
        assert event.operations.get(step="send_confirmation").last_error == NO_ADDRESS

        # Applying it twice, and the sender's repeat, change nothing.
        assert "0 event(s) changed" in remap(jotform)
        again = post(client, base, path, sample)
        assert again.status_code == 200 and again.json() == {"event_id": event_id}
        time.sleep(STRAY_WORK_SECONDS)
        assert counts(sandbox) == (2, 2, 0)
        assert Event.objects.filter(source=jotform).count() == 1
        assert Operation.objects.filter(event_id=event_id).count() == 3
    cluster.stop(signal.SIGINT, timeout=20)


def test_the_captured_jotform_delivery_over_real_parts(sandbox, web_server, qcluster_factory):
    """Jotform's own delivery of a tutoring form with no email field: answered 200, one
    record and one task, no email; its repeat changes nothing."""
    cluster = qcluster_factory()
    source, path = hook_source("jotform", "e2e-jotform-captured")
    sample = jotform_captured_tutoring()
    with httpx.Client(timeout=30) as client:
        first = post(client, web_server.url, path, sample)
        assert first.status_code == 200, first.text
        event_id = first.json()["event_id"]
        assert wait_done(event_id) == COMPLETED_WITHOUT_EMAIL
        assert counts(sandbox) == (1, 1, 0)
        again = post(client, web_server.url, path, sample)
        assert again.status_code == 200 and again.json() == {"event_id": event_id}
        time.sleep(STRAY_WORK_SECONDS)
    assert counts(sandbox) == (1, 1, 0)
    assert Event.objects.filter(source=source).count() == 1
    (record,) = sandbox.client.get("/crm/records").json()["results"]
    assert (record["name"], record["email"]) == ("Niloth P", "")
    assert not ReviewCase.objects.filter(event_id=event_id).exists()
    cluster.stop(signal.SIGINT, timeout=20)


def html_without_id() -> Sample:
    """A plain website form posted without form.js: no `submission_id`, so its key is
    a fingerprint of the delivery."""
    sample = SAMPLES["html"]
    body, _, _ = sample.body.partition(b"&submission_id=")
    return replace(sample, body=body)


def test_an_unreadable_delivery_without_an_id_is_one_submission_once_its_map_is_fixed(
    sandbox, web_server, qcluster_factory
):
    """Kept unreadable under a wrong map, then the map corrected, in both orders: the
    byte-identical delivery posted again, then the map applied; and the map applied,
    then the delivery posted again. Either way one record, one task, one email, and
    the repeat answered with the event it repeats."""
    cluster = qcluster_factory()
    sample = html_without_id()
    with httpx.Client(timeout=30) as client:
        for number, repost_first in enumerate((True, False)):
            source, path = hook_source("html", f"e2e-html-no-id-{number}", ANOTHER_FORMS_MAP)
            first = post(client, web_server.url, path, sample)
            assert first.status_code == 202, first.text
            event_id = first.json()["event_id"]
            source.profile_overrides = {}
            source.save(update_fields=["profile_overrides"])
            if repost_first:
                again = post(client, web_server.url, path, sample)
                assert (again.status_code, again.json()) == (200, {"event_id": event_id})
            assert "processed, first step queued" in remap(source)
            wait_done(event_id)
            if not repost_first:
                again = post(client, web_server.url, path, sample)
                assert (again.status_code, again.json()) == (200, {"event_id": event_id})
            time.sleep(STRAY_WORK_SECONDS)
            assert counts(sandbox) == (number + 1, number + 1, number + 1)
            assert Event.objects.filter(source=source).count() == 1
            assert not ReviewCase.objects.filter(
                event_id=event_id, status__in=ReviewCase.OPEN_STATUSES
            ).exists()
    stats = sandbox.stats()
    assert (
        set(stats["messages_by_recipient"].values()) == {2}
        and len(stats["messages_by_recipient"]) == 1
    )
    cluster.stop(signal.SIGINT, timeout=20)
