"""Reconciliation against the real sandbox: each planted mismatch is found, once.

Mismatches are planted the way they happen in life: staff create, delete, edit
records in the CRM behind Onefold's back, uniqueness is off, a worker dies
holding a claim, a create is refused.
"""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from idempotency_core.execution.claims import operation_claim
from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.ingest import event_ingest
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import (
    Event,
    Operation,
    ReconciliationFinding,
    ReconciliationRecord,
    ReconciliationRun,
    ReviewCase,
)
from idempotency_core.reconciliation.compare import ReconciliationError, reconcile, run_summary
from tests.factories import completed, ingest, submission

NONE_NEW = dict.fromkeys(("missing", "duplicate", "orphan", "removed", "changed", "stuck"), 0)


def enquiry(event: Event) -> Operation:
    return event.operations.get(step="create_enquiry")


def period() -> dict:
    now = timezone.now()
    return {"since": now - timedelta(days=1), "until": now + timedelta(minutes=1)}


@pytest.fixture
def planted(sandbox) -> dict[str, object]:
    """One of each mismatch, next to events that are fine."""
    crm = sandbox.client
    fine = [completed(f"fine-{n}") for n in range(3)]

    deleted = completed("deleted")
    crm.delete(f"/crm/records/{enquiry(deleted).destination_ref}").raise_for_status()

    edited = completed("edited")
    crm.patch(
        f"/crm/records/{enquiry(edited).destination_ref}", json={"external_ref": "typed-by-staff"}
    ).raise_for_status()

    doubled = completed("doubled")
    sandbox.capabilities(unique_external_ref=False)
    second = crm.post(
        "/crm/records", json={"external_ref": enquiry(doubled).key, "name": "Ada again"}
    )
    assert second.status_code == 201

    by_hand = crm.post("/crm/records", json={"external_ref": "by-hand", "name": "Walk-in"})
    no_ref = crm.post("/crm/records", json={"name": "No reference at all"})

    refused = ingest("refused")
    sandbox.fault("create_record", "http_400")
    assert operation_execute(operation_id=enquiry(refused).pk) == "permanent"
    assert enquiry(refused).status == "needs_review"

    abandoned = ingest("abandoned")
    assert operation_claim(operation_id=enquiry(abandoned).pk) is not None  # and the worker dies
    Event.objects.filter(pk=abandoned.pk).update(received_at=timezone.now() - timedelta(hours=2))

    return {
        "fine": fine,
        "deleted": deleted,
        "edited": edited,
        "doubled": doubled,
        "doubled_ids": sorted([enquiry(doubled).destination_ref, second.json()["id"]]),
        "orphan_ids": sorted([by_hand.json()["id"], no_ref.json()["id"]]),
        "refused": refused,
        "abandoned": abandoned,
    }


def findings(run: ReconciliationRun) -> set[tuple[str, str]]:
    return set(ReconciliationFinding.objects.filter(run=run).values_list("kind", "subject"))


@pytest.mark.django_db
def test_each_planted_mismatch_is_found_once_across_two_runs(planted, sandbox):
    first = reconcile(**period())
    # The refused enquiry's finding is evidence on its own case, not a new case.
    assert first.findings_total["missing"] == 1
    assert run_summary(first)["findings"] == {
        "missing": 0,
        "duplicate": 1,
        "orphan": 2,
        "removed": 1,
        "changed": 1,
        "stuck": 1,
    }
    assert run_summary(first)["events"] == 8
    # fine, edited, doubled (2), by hand (2)
    assert run_summary(first)["destination_records"] == 3 + 1 + 2 + 2

    op = {name: enquiry(planted[name]) for name in ("deleted", "edited", "doubled", "refused")}
    cases = {(c.kind, c.subject): c for c in ReviewCase.objects.filter(kind__startswith="recon_")}
    assert set(cases) == {
        ("recon_removed", f"operation:{op['deleted'].pk}"),
        ("recon_changed", f"operation:{op['edited'].pk}"),
        ("recon_duplicate", f"external_ref:{op['doubled'].key}"),
        ("recon_stuck", f"operation:{enquiry(planted['abandoned']).pk}"),
        *(("recon_orphan", f"record:crm:{record_id}") for record_id in planted["orphan_ids"]),
    }
    (refusal,) = ReviewCase.objects.filter(operation=op["refused"], status="open")
    assert refusal.kind == "permanent_failure"
    assert refusal.evidence["reconciliation"][0]["kind"] == "missing"
    duplicate = cases[("recon_duplicate", f"external_ref:{op['doubled'].key}")]
    assert duplicate.event_id == planted["doubled"].pk
    assert sorted(duplicate.evidence["record_ids"]) == planted["doubled_ids"]
    assert duplicate.evidence["reconciliation_run"] == first.pk
    assert (
        cases[("recon_removed", f"operation:{op['deleted'].pk}")].operation_id == op["deleted"].pk
    )
    changed = cases[("recon_changed", f"operation:{op['edited'].pk}")]
    assert changed.evidence["record_ids"] == [op["edited"].destination_ref]

    second = reconcile(**period())
    assert run_summary(second)["findings"] == NONE_NEW
    assert findings(second) == findings(first)
    assert ReviewCase.objects.filter(kind__startswith="recon_").count() == 6
    # Nothing was merged or changed in the CRM by reconciling.
    assert (
        sorted(r["id"] for r in planted_records(sandbox) if r["external_ref"] == op["doubled"].key)
        == planted["doubled_ids"]
    )
    # Staging rows are gone once a run completes; the findings keep the ids.
    assert not ReconciliationRecord.objects.exists()


def planted_records(planted: dict) -> list[dict]:
    import httpx
    from django.conf import settings

    return httpx.get(
        f"{settings.DESTINATION_URL}/crm/records", params={"since": "2000-01-01T00:00:00Z"}
    ).json()["results"]


@pytest.mark.django_db
def test_a_matching_destination_has_no_findings(sandbox):
    for n in range(5):
        completed(f"clean-{n}")
    run = reconcile(**period())
    assert run_summary(run) == {
        "run_id": run.pk,
        "events": 5,
        "destination_records": 5,
        "findings": NONE_NEW,
    }


@pytest.mark.django_db
def test_events_outside_the_period_and_other_sources_are_left_out(sandbox):
    completed("old")
    Event.objects.update(received_at=timezone.now() - timedelta(days=3))
    other, _ = source_get_or_create(name="other-site")
    event_ingest(source=other, key="elsewhere", payload=submission())
    website, _ = source_get_or_create(name="website")
    run = reconcile(**period(), source=website)
    # The old event's record was created just now, so it is listed, and it is
    # accounted for by its operation: no orphan, and nothing about the old event.
    assert run_summary(run)["events"] == 0
    assert run_summary(run)["destination_records"] == 1
    assert run_summary(run)["findings"] == NONE_NEW


@pytest.mark.django_db
def test_a_dry_run_opens_no_case_but_counts_what_it_would_open(planted):
    dry = reconcile(**period(), dry_run=True)
    # Seven findings, six of them new: the refused enquiry is already in review.
    assert sum(run_summary(dry)["findings"].values()) == 6
    assert not ReviewCase.objects.filter(kind__startswith="recon_").exists()
    real = reconcile(**period())
    assert findings(real) == findings(dry)
    again = reconcile(**period(), dry_run=True)
    assert run_summary(again)["findings"] == NONE_NEW


@pytest.mark.django_db
def test_an_interrupted_run_resumed_finds_what_an_uninterrupted_one_finds(
    planted, sandbox, settings
):
    sandbox.client.post("/_sandbox/seed", json={"count": 40, "prefix": "legacy-"})
    settings.ONEFOLD_RECONCILE_PAGE_SIZE = 4  # 48 records: 12 pages

    class Crash(Exception):
        pass

    def crash_after_three_pages(progress) -> None:
        if progress.phase == "listing" and progress.pages == 3:
            raise Crash

    window = period()
    with pytest.raises(Crash):
        reconcile(**window, dry_run=True, progress=crash_after_three_pages)
    interrupted = ReconciliationRun.objects.get()
    assert interrupted.status == "listing"
    assert (interrupted.pages_fetched, interrupted.records_staged) == (3, 12)
    assert ReconciliationRecord.objects.filter(run=interrupted).count() == 12

    # Asking for the same period again picks the unfinished run up where it stopped.
    resumed = reconcile(**window, dry_run=True)
    assert resumed.pk == interrupted.pk
    assert resumed.pages_fetched == 12

    uninterrupted = reconcile(**window, dry_run=True)
    assert uninterrupted.pk != resumed.pk
    assert run_summary(resumed)["findings"] == run_summary(uninterrupted)["findings"]
    assert run_summary(resumed)["findings"]["orphan"] == 42
    assert resumed.records_staged == uninterrupted.records_staged == 48
    assert set(
        ReconciliationFinding.objects.filter(run=resumed).values_list(
            "kind", "subject", "record_ids"
        )
    ) == set(
        ReconciliationFinding.objects.filter(run=uninterrupted).values_list(
            "kind", "subject", "record_ids"
        )
    )


@pytest.mark.django_db
def test_resume_by_id_and_refusals(planted, settings):
    settings.ONEFOLD_RECONCILE_PAGE_SIZE = 2

    def stop(progress) -> None:
        if progress.pages == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        reconcile(**period(), progress=stop)
    run = ReconciliationRun.objects.get()
    # Another process holding the lease is refused.
    ReconciliationRun.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    with pytest.raises(ReconciliationError, match="another process"):
        reconcile(resume_run_id=run.pk)
    ReconciliationRun.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now())
    done = reconcile(resume_run_id=run.pk)
    assert sum(run_summary(done)["findings"].values()) == 6
    with pytest.raises(ReconciliationError, match="already completed"):
        reconcile(resume_run_id=run.pk)


@pytest.mark.django_db
def test_the_command_prints_one_json_object(planted):
    out, err = StringIO(), StringIO()
    window = period()
    call_command(
        "reconcile",
        "--since",
        window["since"].isoformat(),
        "--until",
        window["until"].isoformat(),
        "--json",
        stdout=out,
        stderr=err,
    )
    result = json.loads(out.getvalue())
    assert list(result) == ["run_id", "events", "destination_records", "findings"]
    assert list(result["findings"]) == [
        "missing",
        "duplicate",
        "orphan",
        "removed",
        "changed",
        "stuck",
    ]
    assert sum(result["findings"].values()) == 6
    assert "pages" in err.getvalue()  # the progress went to stderr

    table = StringIO()
    call_command(
        "reconcile",
        "--since",
        window["since"].isoformat(),
        "--until",
        window["until"].isoformat(),
        "--source",
        "website",
        stdout=table,
        stderr=StringIO(),
    )
    assert "orphan" in table.getvalue() and "new cases" in table.getvalue()


@pytest.mark.django_db
def test_the_command_names_its_destination_and_refuses_unknown_names(planted):
    window = ["--since", period()["since"].isoformat(), "--until", period()["until"].isoformat()]
    out = StringIO()
    call_command(
        "reconcile", *window, "--destination", "crm", "--json", stdout=out, stderr=StringIO()
    )
    result = json.loads(out.getvalue())
    assert ReconciliationRun.objects.get(pk=result["run_id"]).destination.name == "crm"
    assert sum(result["findings"].values()) == 6
    for option, name in (("--destination", "nowhere"), ("--source", "nobody")):
        with pytest.raises(CommandError, match=f"no {option[2:]} named {name}"):
            call_command("reconcile", *window, option, name, stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="--since and --until are required"):
        call_command("reconcile", "--json", stdout=StringIO(), stderr=StringIO())


@pytest.mark.django_db
def test_the_daily_schedule_exists_once():
    from django_q.models import Schedule

    assert Schedule.objects.filter(name="onefold-reconcile-daily").count() == 1
    schedule = Schedule.objects.get(name="onefold-reconcile-daily")
    assert schedule.func == "idempotency_core.tasks.reconcile_daily"
    assert schedule.schedule_type == Schedule.DAILY


@pytest.mark.django_db
def test_the_console_lists_runs_and_drills_into_findings(planted, client, django_user_model):
    from django.contrib.auth.models import Group

    run = reconcile(**period())
    reviewer = django_user_model.objects.create_user("rita", password="pw", is_staff=True)
    reviewer.groups.add(Group.objects.get(name="Reviewers"))
    outsider = django_user_model.objects.create_user("nora", password="pw")

    client.force_login(outsider)
    assert client.get("/console/reconciliation/").status_code == 403  # signed in, not staff

    client.force_login(reviewer)
    listing = client.get("/console/reconciliation/")
    assert listing.status_code == 200
    assert f"/console/reconciliation/{run.pk}/" in listing.content.decode()

    detail = client.get(f"/console/reconciliation/{run.pk}/")
    page = detail.content.decode()
    assert detail.status_code == 200
    assert page.count("/console/cases/") >= 7
    orphans = client.get(f"/console/reconciliation/{run.pk}/?kind=orphan").content.decode()
    assert orphans.count("record:crm:") == 2
    assert "external_ref:" not in orphans


@pytest.mark.django_db
def test_the_daily_task_reconciles_yesterday_for_each_crm(sandbox):
    from idempotency_core.reconciliation.compare import reconcile_daily

    event = completed("yesterday")
    yesterday = timezone.now().replace(hour=12, minute=0) - timedelta(days=1)
    Event.objects.filter(pk=event.pk).update(received_at=yesterday)
    sandbox.client.delete(f"/crm/records/{enquiry(event).destination_ref}").raise_for_status()
    [summary] = reconcile_daily()
    assert summary["events"] == 1
    assert summary["findings"]["removed"] == 1
    run = ReconciliationRun.objects.get()
    assert (run.trigger, run.until - run.since) == ("schedule", timedelta(days=1))
    assert reconcile_daily()[0]["findings"] == NONE_NEW  # a repeat opens nothing twice
