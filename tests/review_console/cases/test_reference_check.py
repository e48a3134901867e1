"""A reference a reviewer types to mark a case resolved: checked by the CRM's adapter.

An outside review found a typed reference pasted into CRM URLs unencoded (the sandbox was
asked for ../../_sandbox/stats) and "the record exists" as the only check, so any
other customer's record settled a case. Here every request the adapter sends is
recorded as it left (the path on the wire), and the sandbox's call counters are
compared before and after.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.models import AuditEntry, Operation, ReviewCase
from idempotency_core.review.cases import case_mark_resolved
from idempotency_core.review.refusals import CaseActionRefusedError
from integrations import http as adapter_http
from integrations.base import DestinationError
from integrations.sandbox.adapter import SandboxCrm

pytestmark = pytest.mark.django_db

TRAVERSALS = [
    "../../_sandbox/stats",
    "rec_000001/../../../_sandbox/stats",
    "..",
    ".",
    "%2e%2e/%2e%2e/_sandbox/stats",
    "..%2F..%2F_sandbox%2Fstats",
    "rec_000001?external_ref=x",
    "rec_000001#fragment",
    "rec_000001/merge",
    "rec_000001\x00",
    "rec_00\n0001",
    "rec_1",  # the sandbox's own id, spelled otherwise
    "REC_000001",
    "x" * 500,
]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The raw path of every request the adapters send from now on, as it left: the
    adapters' one pooled client (integrations/http.py) is replaced, for this test,
    by one that records each request it sends."""
    paths: list[str] = []

    def record(request: httpx.Request) -> None:
        sent = f"{request.method} {request.url.raw_path.decode()}"
        # The sandbox adapter's own question about its capabilities is
        # not a request about a record.
        if sent != "GET /_sandbox/capabilities":
            paths.append(sent)

    client = httpx.Client(follow_redirects=False, event_hooks={"request": [record]})
    monkeypatch.setattr(adapter_http, "_client", client)
    monkeypatch.setattr(adapter_http, "_client_pid", os.getpid())
    yield paths
    client.close()


def test_a_typed_path_is_refused_before_any_request(users, ambiguous_case, sandbox, sent):
    case = ambiguous_case("traversal")
    sent.clear()  # the create that made the case; what follows is the reviewer's
    calls_before = sandbox.stats()["calls"]
    for typed in TRAVERSALS:
        with pytest.raises(CaseActionRefusedError, match="is not a crm record reference"):
            case_mark_resolved(
                case_id=case.pk, actor=users["reviewer"], destination_ref=typed, reason="found"
            )
    assert sent == []
    assert sandbox.stats()["calls"] == calls_before
    case.refresh_from_db()
    assert case.status == ReviewCase.Status.OPEN
    assert Operation.objects.get(pk=case.operation_id).status == Operation.Status.NEEDS_REVIEW


def test_the_console_answers_a_typed_path_with_the_reason_on_the_form(
    users, ambiguous_case, sandbox, sent
):
    case = ambiguous_case("traversal-console")
    sent.clear()  # the create that made the case; what follows is the reviewer's
    client = Client()
    client.force_login(users["reviewer"])
    response = client.post(
        reverse("console:case-resolve", args=[case.pk]),
        {"confirm": "yes", "reason": "found it", "destination_ref": "../../_sandbox/stats"},
    )
    assert response.status_code == 200  # the confirmation page again, with the refusal
    assert b"look like rec_000123" in response.content
    assert sent == []


def test_the_adapter_keeps_any_id_inside_its_own_path(sandbox, sent):
    crm = SandboxCrm(sandbox.url, timeout=5)
    record = crm.create_record(external_ref="op-traversal", fields={"name": "Ada"})
    # Without the format check, an id still cannot leave /crm/records/<one segment>.
    assert crm.get_record("../../_sandbox/stats") is None  # 404, not the stats document
    assert crm.get_record(f"{record.ref}/../../_sandbox/stats") is None
    with pytest.raises(DestinationError):
        crm.update_record(record_id="../../_sandbox/reset", fields={"name": "Eve"})
    with pytest.raises(DestinationError):
        crm.find_task(record_id="../../_sandbox/stats#", external_ref="x")
    for dots in ("..", "."):
        with pytest.raises(DestinationError, match="cannot name a record"):
            crm.get_record(dots)
    assert crm.get_record(record.ref)["external_ref"] == "op-traversal"
    lookups = [p for p in sent if p != "POST /crm/records"]
    assert lookups == [
        "GET /crm/records/..%2F..%2F_sandbox%2Fstats",
        f"GET /crm/records/{record.ref}%2F..%2F..%2F_sandbox%2Fstats",
        "PATCH /crm/records/..%2F..%2F_sandbox%2Freset",
        "GET /crm/records/..%2F..%2F_sandbox%2Fstats%23/tasks?external_ref=x",
        f"GET /crm/records/{record.ref}",
    ]
    assert sandbox.stats()["records"] == 1


def test_another_operations_record_does_not_settle_this_case(users, ambiguous_case, sandbox):
    first = ambiguous_case("customer-a")
    second = ambiguous_case("customer-b")
    ref_a, ref_b = _record_of(sandbox, first), _record_of(sandbox, second)
    rita = users["reviewer"]

    with pytest.raises(CaseActionRefusedError, match="belongs to another submission"):
        case_mark_resolved(case_id=second.pk, actor=rita, destination_ref=ref_a, reason="x")

    second.refresh_from_db()
    assert second.status == ReviewCase.Status.OPEN
    assert Operation.objects.get(pk=second.operation_id).destination_ref in ("", None)
    case_mark_resolved(case_id=second.pk, actor=rita, destination_ref=ref_b, reason="found")
    second.refresh_from_db()
    operation = Operation.objects.get(pk=second.operation_id)
    assert (second.status, operation.status, operation.destination_ref) == (
        ReviewCase.Status.RESOLVED,
        Operation.Status.SUCCEEDED,
        ref_b,
    )
    entry = AuditEntry.objects.get(case=second, action="case_resolved")
    assert entry.details["verification"] == "external_ref_matches"
    assert sandbox.stats()["records"] == 2  # nothing created by the checks


def test_a_record_made_by_hand_counts_once_it_carries_the_operations_key(
    users, ambiguous_case, sandbox
):
    case = ambiguous_case("by-hand")
    operation = Operation.objects.get(pk=case.operation_id)
    crm = SandboxCrm(sandbox.url, timeout=5)
    by_hand = crm.create_record(external_ref="typed-by-staff", fields={"name": "Ada"}).ref
    rita = users["reviewer"]
    with pytest.raises(CaseActionRefusedError, match="belongs to another submission"):
        case_mark_resolved(case_id=case.pk, actor=rita, destination_ref=by_hand, reason="x")
    crm.update_record(record_id=by_hand, fields={"external_ref": operation.key})
    case_mark_resolved(case_id=case.pk, actor=rita, destination_ref=by_hand, reason="made by hand")
    operation.refresh_from_db()
    assert (operation.status, operation.destination_ref) == ("succeeded", by_hand)


def _record_of(sandbox, case: ReviewCase) -> str:
    """The record the case's unclear create left in the CRM, found by its key."""
    key = Operation.objects.get(pk=case.operation_id).key
    sandbox.capabilities(lookup=True)  # the case was made with lookup off
    found = SandboxCrm(sandbox.url, timeout=5).find_record(external_ref=key)
    assert found is not None
    return found
