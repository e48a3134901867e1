"""A source's `hold` policy: a suspected duplicate waits, unwritten, for a reviewer.

Against PostgreSQL and the sandbox over loopback (HTTP for the CRM, SMTP for the
email); the workers' task is run in process (tasks.operation_run, the queued entry
point), except in the end-to-end test, which runs gunicorn and a real cluster.
"""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from io import StringIO

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.engine import operation_claim
from idempotency_core.intake.ingest import event_status, suspected_duplicate_flag
from idempotency_core.intake.sources import source_create_with_key, source_duplicates_set
from idempotency_core.models import AuditEntry, Event, Operation, ReviewCase, Source
from idempotency_core.review.cases import case_mark_resolved
from idempotency_core.review.held_duplicates import held_duplicate_link, held_duplicate_separate
from idempotency_core.review.refusals import CaseActionRefusedError
from idempotency_core.tasks import operation_run
from tests.factories import ingest, make_user, op, submission
from tests.support.processes import wait_for

HELD = ReviewCase.Kind.DUPLICATE_HELD
FLAGGED = ReviewCase.Kind.SUSPECTED_DUPLICATE
MESSAGE = "Please quote for a kitchen refit."
# The same message once case and whitespace are set aside.
SAME_MESSAGE_RETYPED = "  please QUOTE for a\tkitchen   refit. "

# `run` is the worker's task, whose chain must not stop for time on a loaded machine
# (conftest.unhurried_chain); serial for the end-to-end test's gunicorn and cluster.
pytestmark = [pytest.mark.serial, pytest.mark.usefixtures("unhurried_chain")]


def policy(value: str) -> Source:
    source = Source.objects.get_or_create(name="website")[0]
    return source_duplicates_set(source=source, policy=value)


def run(event: Event) -> str | None:
    """The first step's task, as a worker runs it: the search, then the chain of steps."""
    return operation_run(op(event, event.operations.order_by("position")[0].step).pk)


def counts(sandbox) -> tuple[int, int, int]:
    stats = sandbox.stats()
    return stats["records"], stats["tasks"], stats["messages"]


def statuses(event: Event) -> dict[str, str]:
    return dict(event.operations.values_list("step", "status"))


@pytest.fixture
def reviewer(db) -> User:
    return make_user("rita", groups=("Reviewers",))


def held_pair(
    sandbox, *, first: str = "a", second: str = "b", suffix: str = ""
) -> tuple[Event, Event, ReviewCase]:
    """Under `hold`: the first submission written, the second held by its own task."""
    policy("hold")
    a = ingest(first, message=MESSAGE + suffix)
    assert run(a) == "succeeded"
    b = ingest(second, message=SAME_MESSAGE_RETYPED + suffix)
    assert run(b) is None  # nothing claimed: held before its first attempt
    return a, b, ReviewCase.objects.get(kind=HELD, event=b)


@pytest.mark.django_db
def test_the_second_submission_waits_unwritten_for_a_reviewer(sandbox):
    a, b, case = held_pair(sandbox)

    assert counts(sandbox) == (1, 1, 1)
    assert statuses(b) == dict.fromkeys(statuses(b), "needs_review")
    assert not b.operations.filter(attempt_count__gt=0).exists()
    first = op(b, "create_enquiry")
    assert set(b.operations.exclude(pk=first.pk).values_list("held_by", flat=True)) == {first.pk}
    assert (case.event, case.operation, case.status) == (b, first, "open")
    assert case.evidence["event_ids"] == [str(a.pk), str(b.pk)]
    assert [h["step"] for h in case.evidence["held_operations"]] == list(
        b.operations.order_by("position").values_list("step", flat=True)
    )
    assert "not written to the CRM" in case.summary
    assert not ReviewCase.objects.filter(kind=FLAGGED).exists()
    assert event_status(list(statuses(b).values())) == "needs_review"
    # The task again (a redelivery, the sweeper): nothing runs, no second case.
    assert run(b) is None
    assert ReviewCase.objects.count() == 1
    assert counts(sandbox) == (1, 1, 1)


@pytest.mark.django_db
def test_same_enquiry_links_it_and_writes_nothing(sandbox, reviewer):
    a, b, case = held_pair(sandbox)

    held_duplicate_link(case_id=case.pk, actor=reviewer, reason="double click")

    assert set(statuses(b).values()) == {"cancelled"}
    assert all(
        str(a.pk) in o.last_error and "not written again" in o.last_error
        for o in b.operations.all()
    )
    assert run(b) is None
    assert counts(sandbox) == (1, 1, 1)
    case.refresh_from_db()
    assert (case.status, case.resolution_code, case.owner) == ("resolved", "same_enquiry", reviewer)
    entry = AuditEntry.objects.get(action="duplicate_linked", case=case)
    assert entry.actor == reviewer and entry.reason == "double click"
    assert entry.details["linked_event"] == str(a.pk)
    record = op(a, "create_enquiry").destination_ref
    assert record and entry.details["linked_references"]["create_enquiry"]["destination_ref"] == (
        record
    )
    assert sorted(entry.details["cancelled_operations"]) == sorted(
        b.operations.values_list("pk", flat=True)
    )
    with pytest.raises(CaseActionRefusedError, match="already resolved"):
        held_duplicate_separate(case_id=case.pk, actor=reviewer, reason="changed my mind")


@pytest.mark.django_db
def test_a_third_click_held_behind_a_linked_second_links_to_the_first(sandbox, reviewer):
    a, b, case = held_pair(sandbox)
    held_duplicate_link(case_id=case.pk, actor=reviewer, reason="double click")
    c = ingest("c", message=MESSAGE)
    assert run(c) is None
    third = ReviewCase.objects.get(kind=HELD, event=c)
    assert third.evidence["event_ids"] == [str(b.pk), str(c.pk)]  # its nearest twin

    held_duplicate_link(case_id=third.pk, actor=reviewer, reason="triple click")

    entry = AuditEntry.objects.get(action="duplicate_linked", case=third)
    assert entry.details["linked_event"] == str(a.pk)  # the one that was written
    assert set(statuses(c).values()) == {"cancelled"}
    assert counts(sandbox) == (1, 1, 1)


@pytest.mark.django_db
def test_separate_enquiry_lets_it_run_as_usual(sandbox, reviewer):
    _, b, case = held_pair(sandbox)

    held_duplicate_separate(case_id=case.pk, actor=reviewer, reason="two kitchens")

    first = op(b, "create_enquiry")
    assert (first.status, first.next_trigger, first.next_triggered_by) == (
        "pending",
        "reviewer",
        reviewer,
    )
    assert not b.operations.filter(held_by__isnull=False).exists()
    assert run(b) == "succeeded"  # its task, queued with the decision
    assert set(statuses(b).values()) == {"succeeded"}
    assert counts(sandbox) == (2, 2, 2)
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "separate_enquiry")
    entry = AuditEntry.objects.get(action="duplicate_released", case=case)
    assert entry.details["released_operation"] == first.pk
    assert ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES).count() == 0


@pytest.mark.django_db
def test_a_decision_needs_a_reason_and_a_held_case(sandbox, reviewer):
    _, _, case = held_pair(sandbox)
    with pytest.raises(CaseActionRefusedError, match="reason"):
        held_duplicate_link(case_id=case.pk, actor=reviewer, reason="  ")
    # Marking it resolved with the first one's record would send a second task and email.
    record = op(Event.objects.get(key="a"), "create_enquiry").destination_ref
    with pytest.raises(CaseActionRefusedError, match="Same enquiry"):
        case_mark_resolved(case_id=case.pk, actor=reviewer, destination_ref=record, reason="r")
    assert ReviewCase.objects.get(pk=case.pk).status == "open"
    policy("flag")
    c = ingest("c", message="Another thing")
    d = ingest("d", message="another   THING")
    run(c), run(d)
    flagged = ReviewCase.objects.get(kind=FLAGGED)
    with pytest.raises(CaseActionRefusedError, match="held as a suspected duplicate"):
        held_duplicate_link(case_id=flagged.pk, actor=reviewer, reason="r")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "second",
    [
        {"message": "Please quote for a bathroom refit."},
        {"form": "brochure", "message": MESSAGE},
    ],
    ids=["another message", "another form"],
)
def test_another_message_or_form_is_not_held(sandbox, second):
    policy("hold")
    a = ingest("a", message=MESSAGE)
    b = ingest("b", **second)
    assert run(a) == "succeeded"
    assert run(b) == "succeeded"
    assert counts(sandbox) == (2, 2, 2)
    assert not ReviewCase.objects.exists()


@pytest.mark.django_db
def test_outside_the_window_is_not_held(sandbox, settings):
    policy("hold")
    a = ingest("a", message=MESSAGE)
    assert run(a) == "succeeded"
    window = timedelta(seconds=settings.ONEFOLD_DUPLICATE_WINDOW_SECONDS)
    Event.objects.filter(pk=a.pk).update(received_at=a.received_at - window - timedelta(seconds=1))
    b = ingest("b", message=MESSAGE)
    assert run(b) == "succeeded"
    assert counts(sandbox) == (2, 2, 2)
    assert not ReviewCase.objects.exists()
    # Just inside the window it is held (the same clock, so the test can fail).
    Event.objects.filter(pk=a.pk).update(received_at=b.received_at - window)
    c = ingest("c", message=MESSAGE)
    assert run(c) is None
    assert ReviewCase.objects.get(kind=HELD).event == c


@pytest.mark.django_db
def test_flag_is_unchanged_both_written_and_a_merge_offered(sandbox):
    policy("flag")
    a = ingest("a", message=MESSAGE)
    b = ingest("b", message=SAME_MESSAGE_RETYPED)
    assert run(a) == "succeeded"
    assert run(b) == "succeeded"
    assert counts(sandbox) == (2, 2, 2)
    case = ReviewCase.objects.get()
    assert (case.kind, case.event) == (FLAGGED, b)
    assert "Both were processed" in case.summary


@pytest.mark.django_db
def test_the_earlier_task_running_late_holds_the_later_one(sandbox):
    """A backlog: both committed before either task ran; the earlier one's task finds
    its later twin and holds it, then writes its own submission."""
    policy("hold")
    a = ingest("a", message=MESSAGE)
    b = ingest("b", message=MESSAGE)
    assert run(a) == "succeeded"
    assert run(b) is None
    assert ReviewCase.objects.get().kind == HELD
    assert counts(sandbox) == (1, 1, 1)


@pytest.mark.django_db
def test_too_late_to_hold_a_claimed_step_it_is_flagged_instead(sandbox):
    """The later one's worker claimed its first step before the earlier one's task
    looked: it may be in the CRM already, so the pair is flagged, never held."""
    policy("hold")
    a = ingest("a", message=MESSAGE)
    b = ingest("b", message=MESSAGE)
    assert operation_claim(operation_id=op(b, "create_enquiry").pk) is not None
    case = suspected_duplicate_flag(operation_id=op(a, "create_enquiry").pk)
    assert case is not None and case.kind == FLAGGED
    assert op(b, "create_enquiry").status == "running"
    assert op(b, "assign_task").held_by is None


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_two_tasks_of_a_pair_at_once_hold_it_once(sandbox):
    """The earlier and the later event's tasks search at the same moment, on
    PostgreSQL, 20 rounds: one held case each time, never a flagged one beside it."""
    policy("hold")
    for n in range(20):
        a = ingest(f"race-a{n}", message=f"{MESSAGE} {n}")
        b = ingest(f"race-b{n}", message=f"{MESSAGE} {n}")
        barrier = threading.Barrier(2)

        def search(operation_id: int, gate: threading.Barrier = barrier) -> None:
            connection.ensure_connection()  # connected before the start: a real race
            gate.wait()
            try:
                suspected_duplicate_flag(operation_id=operation_id)
            finally:
                connection.close()

        threads = [
            threading.Thread(target=search, args=(op(e, "create_enquiry").pk,)) for e in (a, b)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cases = list(ReviewCase.objects.filter(event=b).values_list("kind", flat=True))
        assert cases == [HELD], (n, cases)
        assert op(b, "create_enquiry").attempt_count == 0


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_hold_waiting_on_a_claim_that_commits_finds_it_too_late(sandbox):
    """A worker's claim of the later one's first step holds its row lock while the
    earlier one's task tries to hold it: once the claim commits, the hold's WHERE no
    longer matches (PostgreSQL re-checks it), so the pair is flagged, not held."""
    policy("hold")
    a = ingest("a", message=MESSAGE)
    b = ingest("b", message=MESSAGE)
    found: list[ReviewCase | None] = []

    def search() -> None:
        try:
            found.append(suspected_duplicate_flag(operation_id=op(a, "create_enquiry").pk))
        finally:
            connection.close()

    with transaction.atomic():
        assert operation_claim(operation_id=op(b, "create_enquiry").pk) is not None
        searcher = threading.Thread(target=search)
        searcher.start()
        wait_for(_someone_waits_for_a_lock, timeout=30, what="the hold to wait for the claim")
    searcher.join()
    (case,) = found
    assert case is not None and case.kind == FLAGGED
    first = op(b, "create_enquiry")
    assert (first.status, first.attempt_count) == ("running", 1)
    assert not b.operations.filter(held_by__isnull=False).exists()


def _someone_waits_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        # Asked inside a transaction: the statistics snapshot is taken once unless cleared.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


# -- the console and the staff API -------------------------------------------------


@pytest.mark.django_db
def test_the_case_page_shows_both_submissions_and_the_two_decisions(sandbox, reviewer):
    a, b, case = held_pair(sandbox)
    client = Client()
    client.force_login(reviewer)
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert 'id="held-duplicate"' in page
    assert reverse("console:submission-detail", args=[a.pk]) in page
    assert reverse("console:submission-detail", args=[b.pk]) in page
    assert ">Same enquiry</button>" in page and ">Separate enquiry</button>" in page
    assert op(a, "create_enquiry").destination_ref in page  # the first one's record
    assert "ada@example.com" not in page  # masked: Reviewers do not see contact details
    # The retyped message is the same apart from spacing and capitals, judged
    # on the real values.
    assert "same apart from spacing or capitals" in page
    block = page[page.index('id="held-duplicate"') :]
    block = re.sub(r"<[^>]+>", " ", block[: block.index("</table>")])  # its visible text
    for code in ("create_enquiry", "assign_task", "send_confirmation", "needs_review", "succeeded"):
        assert code not in block, code  # in words: the glossary's labels
    assert "waiting for a person" in block and ": done" in block
    # Only the two decisions settle it: no generic replay, reference or close.
    for generic in ("case-replay", "case-resolve", "case-close", "case-lookup"):
        assert reverse(f"console:{generic}", args=[case.pk]) not in page, generic

    url = reverse("console:case-hold-same", args=[case.pk])
    confirm = client.post(url).content.decode()  # the button: the confirmation page
    assert "Link to the first submission" in confirm and 'name="reason"' in confirm
    assert client.post(url, {"confirm": "yes", "reason": ""}).status_code == 200  # refused
    assert ReviewCase.objects.get(pk=case.pk).status == "open"
    done = client.post(url, {"confirm": "yes", "reason": "one kitchen"})
    assert done.status_code == 302
    case.refresh_from_db()
    assert (case.resolution_code, case.status) == ("same_enquiry", "resolved")
    assert client.get(url).status_code == 405
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert "Same enquiry…" not in page  # settled: no buttons


@pytest.mark.django_db
def test_the_console_separate_decision_and_the_api(sandbox, reviewer):
    _, b, case = held_pair(sandbox)
    client = Client()
    client.force_login(reviewer)
    url = reverse("console:case-hold-separate", args=[case.pk])
    assert client.post(url, {"confirm": "yes", "reason": "two rooms"}).status_code == 302
    assert op(b, "create_enquiry").status == "pending"
    # The staff API: a second decision on a settled case is a conflict.
    response = client.post(
        f"/console/api/cases/{case.pk}/same-enquiry/",
        {"reason": "r"},
        content_type="application/json",
    )
    assert response.status_code == 409, response.content
    _, d, other = held_pair(sandbox, first="c", second="d", suffix=" Again")
    response = client.post(
        f"/console/api/cases/{other.pk}/same-enquiry/",
        {"reason": "same"},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["resolution_code"] == "same_enquiry"
    assert set(statuses(d).values()) == {"cancelled"}


@pytest.mark.django_db
def test_staff_without_the_change_permission_cannot_decide(sandbox):
    _, _, case = held_pair(sandbox)
    viewer = make_user("vic")
    viewer.user_permissions.add(*Permission.objects.filter(codename="view_reviewcase"))
    client = Client()
    client.force_login(viewer)
    url = reverse("console:case-hold-same", args=[case.pk])
    assert client.post(url, {"confirm": "yes", "reason": "x"}).status_code == 403
    assert ReviewCase.objects.get(pk=case.pk).status == "open"


# -- create_source ---------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("profile", ["api", "tally"])
def test_create_source_duplicates_hold(profile):
    out = StringIO()
    call_command("create_source", "shop", "--duplicates", "hold", "--profile", profile, stdout=out)
    assert Source.objects.get(name="shop").duplicates == "hold"
    assert "held before the CRM write" in out.getvalue()
    call_command("create_source", "other", stdout=StringIO())
    assert Source.objects.get(name="other").duplicates == "flag"


# -- end to end: gunicorn, a real cluster, the sandbox ------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_end_to_end_held_until_a_reviewer_decides(sandbox, web_server, qcluster_factory):
    qcluster_factory()
    source, _, key = source_create_with_key(name="website")
    source_duplicates_set(source=source, policy="hold")
    reviewer = make_user("rita", groups=("Reviewers",))
    url = f"{web_server.url}/api/v1/submissions/"

    def send(idem: str, email: str, message: str) -> None:
        body = submission(contact={"name": "Ada", "email": email}, message=message)
        headers = {"Authorization": f"Api-Key {key}", "Idempotency-Key": idem}
        assert httpx.post(url, json=body, headers=headers, timeout=60).status_code == 202

    def settled(*keys: str) -> bool:
        """Each event written to the end or waiting for a person."""
        events = Event.objects.filter(key__in=keys).prefetch_related("operations")
        found = [event_status([o.status for o in e.operations.all()]) for e in events]
        return len(found) == len(keys) and "processing" not in found

    pairs = {"same": ("s1", "s2", "same@example.com"), "sep": ("p1", "p2", "sep@example.com")}
    for first, second, email in pairs.values():
        send(first, email, MESSAGE)
        send(second, email, SAME_MESSAGE_RETYPED)
    wait_for(lambda: settled("s1", "s2", "p1", "p2"), timeout=120, interval=0.5, what="tasks")
    assert counts(sandbox) == (2, 2, 2)  # one per pair until a reviewer decides
    cases = {c.event.key: c for c in ReviewCase.objects.filter(kind=HELD).select_related("event")}
    assert len(cases) == 2  # whichever of a pair is later is held

    def held_case(first: str, second: str) -> ReviewCase:
        return next(c for k, c in cases.items() if k in (first, second))

    held_duplicate_link(case_id=held_case("s1", "s2").pk, actor=reviewer, reason="same")
    held_duplicate_separate(case_id=held_case("p1", "p2").pk, actor=reviewer, reason="two")
    wait_for(
        lambda: (
            Operation.objects.filter(event__key__in=["p1", "p2"], status="succeeded").count() == 6
        ),
        timeout=120,
        interval=0.5,
        what="the separate enquiry to be written",
    )
    assert counts(sandbox) == (3, 3, 3)  # the linked one never written
    stats = sandbox.stats()
    assert set(stats["records_by_external_ref"].values()) == {1}
    assert len(stats["messages_by_message_id"]) == 3
    assert set(
        Operation.objects.filter(event__key__in=["s1", "s2"]).values_list("status", flat=True)
    ) == {"succeeded", "cancelled"}
