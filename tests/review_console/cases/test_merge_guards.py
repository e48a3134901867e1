"""Merge guards: one unsettled merge per pair of records, whichever way round and from
whichever case; differences judged on the real values before masking; what the
reviewer typed kept when the form is refused; the right words for "same record on
both sides".
"""

from __future__ import annotations

import html
import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from idempotency_core.audit.cases import review_case_open
from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Event, Operation, ReviewCase
from idempotency_core.review.merge import duplicate_merge_request
from idempotency_core.review.refusals import MergeRefusedError
from tests.factories import ingest, make_user


def two_records(sandbox, key: str, names: tuple[str, str] = ("Ada Lovelace", "Ada Lovelace")):
    """Two enquiries of one person really created in the CRM: their events and record ids."""
    events, refs = [], []
    for n, name in enumerate(names):
        event = ingest(
            f"{key}-{n}",
            contact={"name": name, "email": f"{key}@example.com"},
            message=f"Message {n} of {key}",
        )
        enquiry = event.operations.get(step="create_enquiry")
        assert operation_execute(operation_id=enquiry.pk) == "succeeded"
        enquiry.refresh_from_db()
        events.append(event)
        refs.append(enquiry.destination_ref)
    return events, refs


def case_about(refs: list[str], event: Event, kind: str = "suspected_duplicate") -> ReviewCase:
    case, _ = review_case_open(
        kind=kind,
        subject=f"records:{kind}:{'+'.join(refs)}",
        summary="Two enquiries from the same contact.",
        event=event,
        evidence={"record_ids": refs},
        system="test",
    )
    return case


def merges_of(refs: list[str]) -> list[Operation]:
    return [
        o
        for o in Operation.objects.filter(step__startswith="merge_duplicate:")
        if {o.arguments["survivor_ref"], o.arguments["duplicate_ref"]} == set(refs)
    ]


@pytest.mark.django_db
def test_the_opposite_merge_of_a_pending_one_is_refused(sandbox):
    rita = make_user("rita", groups=("Reviewers",))
    events, (a, b) = two_records(sandbox, "opp")
    case = case_about([a, b], events[1])
    duplicate_merge_request(
        case_id=case.pk, survivor_ref=a, duplicate_ref=b, actor=rita, reason="x"
    )
    with pytest.raises(MergeRefusedError, match="already under way"):
        duplicate_merge_request(
            case_id=case.pk, survivor_ref=b, duplicate_ref=a, actor=rita, reason="y"
        )
    # From another case about the same two records: refused too.
    other = case_about([a, b], events[0], kind="recon_duplicate")
    with pytest.raises(MergeRefusedError, match="already under way"):
        duplicate_merge_request(
            case_id=other.pk, survivor_ref=b, duplicate_ref=a, actor=rita, reason="z"
        )
    (merge,) = merges_of([a, b])
    assert operation_execute(operation_id=merge.pk) == "succeeded"
    assert sandbox.stats()["records"] == 1
    # Once done, the record merged away cannot be merged again.
    with pytest.raises(MergeRefusedError, match="already merged"):
        duplicate_merge_request(
            case_id=other.pk, survivor_ref=a, duplicate_ref=b, actor=rita, reason="again"
        )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_two_concurrent_opposite_merges_one_accepted_one_refused(sandbox):
    """Real transactions on PostgreSQL, two request threads behind a barrier, many rounds,
    half on one case (the case's row lock) and half on two cases naming the same records
    (the records' events' row locks)."""
    rita = make_user("rita", groups=("Reviewers",))
    rounds = 12
    for round_ in range(rounds):
        events, (a, b) = two_records(sandbox, f"race{round_}")
        first = case_about([a, b], events[1])
        second = first if round_ % 2 else case_about([a, b], events[0], kind="recon_duplicate")
        answers = race(rita, [(first, a, b), (second, b, a)], reason=f"round {round_}")
        codes = sorted(code for code, _ in answers)
        assert codes == [200, 302], (round_, codes)
        refused = next(body for code, body in answers if code == 200)
        assert "already under way" in refused
        assert len(merges_of([a, b])) == 1, round_
    (merge,) = merges_of([a, b])
    assert operation_execute(operation_id=merge.pk) == "succeeded"
    assert sandbox.stats()["records"] == 2 * rounds - 1  # the last pair is one record now


def race(user, requests: list[tuple[ReviewCase, str, str]], *, reason: str) -> list[tuple]:
    """Posts each (case, survivor, duplicate) merge in its own thread (its own database
    connection), all released at once by a barrier: (status code, body) of each."""
    barrier = threading.Barrier(len(requests))
    answers: list[tuple] = []

    def post(case: ReviewCase, survivor: str, duplicate: str) -> None:
        client = Client()
        client.force_login(user)
        data = {"confirm": "yes", "survivor": survivor, "duplicate": duplicate, "reason": reason}
        barrier.wait()
        try:
            response = client.post(reverse("console:case-merge", args=[case.pk]), data)
            answers.append((response.status_code, response.content.decode()))
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=request) for request in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


@pytest.mark.django_db
def test_differences_are_judged_before_masking(sandbox):
    rita = make_user("rita", groups=("Reviewers",))  # contact details masked
    events, refs = two_records(sandbox, "mask", names=("Lena Tan", "Lars Tell"))
    case = case_about(refs, events[1])
    client = Client()
    client.force_login(rita)
    page = client.get(reverse("console:case-compare", args=[case.pk])).content.decode()
    start = page.index('<tr><th scope="row">Name')
    name_row = page[start : page.index("</tr>", start)]
    assert name_row.count("L. T.") == 2  # both masked alike...
    assert "differs" in name_row  # ...yet marked: the real names differ
    assert "Lena" not in page and "Lars" not in page
    start = page.index('<tr><th scope="row">Email')
    email_row = page[start : page.index("</tr>", start)]
    assert "differs" not in email_row  # the same address on both


@pytest.mark.django_db
def test_a_refused_merge_keeps_the_typed_reason_and_says_why(sandbox):
    rita = make_user("rita", groups=("Reviewers",))
    events, (a, b) = two_records(sandbox, "same")
    case = case_about([a, b], events[1])
    client = Client()
    client.force_login(rita)
    note = "Same kitchen, same phone number; she called twice."
    response = client.post(
        reverse("console:case-merge", args=[case.pk]),
        {"confirm": "yes", "survivor": a, "duplicate": a, "preset": "same_request", "note": note},
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert f"You chose record {a} on both sides" in page
    assert f'name="note" id="id_note" value="{note}"' in page
    assert not merges_of([a, b]) and not Operation.objects.filter(step__startswith="merge").exists()
    # A missing choice keeps the note too, and names what is missing.
    page = client.post(
        reverse("console:case-merge", args=[case.pk]),
        {"confirm": "yes", "preset": "same_request", "note": note},
    ).content.decode()
    assert "Choose the record that stays." in page and f'value="{note}"' in page


@pytest.mark.django_db
def test_a_merge_and_the_case_it_spawned_link_to_each_other(sandbox):
    rita = make_user("rita", groups=("Reviewers",))
    events, (a, b) = two_records(sandbox, "spawn")
    case = case_about([a, b], events[1])
    merge = duplicate_merge_request(
        case_id=case.pk, survivor_ref=a, duplicate_ref=b, actor=rita, reason="same person"
    )
    # Someone deleted the duplicate in the CRM meanwhile: the merge is refused there.
    sandbox.client.delete(f"/crm/records/{b}").raise_for_status()
    assert operation_execute(operation_id=merge.pk) == "permanent"
    spawned = ReviewCase.objects.get(operation=merge)
    client = Client()
    client.force_login(rita)
    case_page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    spawned_page = client.get(reverse("console:case-detail", args=[spawned.pk])).content.decode()
    assert f'href="{reverse("console:case-detail", args=[spawned.pk])}"' in case_page
    assert "Opened by an action taken on this case" in case_page
    assert f'href="{reverse("console:case-detail", args=[case.pk])}"' in spawned_page
    assert "This case's step was asked for on that case" in html.unescape(spawned_page)
    # The merge step reads as what it does, on the spawned case.
    assert f"Merge CRM record {b} into the one that stays" in spawned_page
