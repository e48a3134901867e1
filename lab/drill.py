"""The failure drill: every interruption point under every destination profile.

For each cell (case x capability profile) the drill resets a private sandbox,
switches the sandbox to the profile (its adapter reads what the sandbox reports),
makes events through the real ingest service, breaks them where the case says
(sandbox faults, or a worker that "dies" after claiming: its claim is left to
expire), and lets the engine and the sweeper recover them. It then counts what the destination holds
(records, tasks, emails) and the open review cases, and compares with what
Onefold promises. A cell fails on any duplicate effect, on any operation that
is neither done nor visible for review, or on counts other than expected.

The drill's tasks go to a queue of their own that no worker listens on, and its
sweeps are scoped to its own operations, so it can run beside a live system.

With `destination="hubspot"` (or salesforce, pipedrive, dataverse) the CRM is
that vendor's emulator, started in this process (lab/emulators/__init__.py),
and its adapter as configured from the environment (the drill supplies the
emulator's credentials where none are set, `VENDOR_SETUP`); email still goes
to the private sandbox's SMTP sink. The one "profile" is the vendor's, and the
counts each cell expects follow from the adapter's capabilities
(`recognition_of`): a repeat recognised (unique reference, a lookup that
proves absence, an idempotency key without a window) adopts every unclear
effect; a lookup that lags writes adopts what it finds after its settle delay
and opens a case for what it cannot find; nothing to recognise opens a case.

By default the drill runs the engine in its own process, one step at a time,
so each interruption lands exactly where the case says. With `cluster=True`
(`manage.py drill --cluster`) the interruptions are set up the same way, but
the recovery after them is left to a real django-q2 cluster that the drill
starts on a second private queue: the worker processes claim, retry, recover
and release the next steps, as in production.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.models import Q
from django.utils import timezone
from django_q.models import OrmQ

from idempotency_core.execution.claims import operation_claim
from idempotency_core.execution.destinations import adapter_for, crm_adapter_for
from idempotency_core.execution.engine import (
    operation_enqueue,
    operation_execute,
    tasks_queued_to,
)
from idempotency_core.execution.perform import operation_perform as perform_claimed
from idempotency_core.execution.sweeper import operations_sweep
from idempotency_core.intake.ingest import event_ingest
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Destination, Event, Operation, ReviewCase, Source
from idempotency_core.platform.env import database_url_of
from idempotency_core.review.refusals import ReplayRefusedError
from idempotency_core.review.replay import operation_replay
from integrations.base import Capabilities
from lab.emulators import CRM_VENDORS, EmulatorUnavailableError, emulator_class
from lab.emulators.kit import EmulatorServer
from lab.overrides import settings_overridden
from lab.sandbox import SandboxServer

DRILL_QUEUE = "onefold-drill"
# Where `cluster=True` hands due operations to the drill's own worker cluster.
DRILL_WORKERS_QUEUE = "onefold-drill-workers"
DRILL_USER = "onefold-drill"
# Short enough that the drill finishes in about a minute; the rules are the same.
# Set on this process's settings for the run, and handed to the --cluster workers
# through their environment (see _drill_cluster).
DRILL_TIMINGS = {
    "ONEFOLD_RETRY_BASE_SECONDS": 0.02,
    "ONEFOLD_RETRY_MAX_SECONDS": 0.1,
    "ONEFOLD_MAX_ATTEMPTS": 5,
    "ONEFOLD_HTTP_TIMEOUT_SECONDS": 5.0,
    # The drill proves exactly-once, not the spam limits: each run writes to its one
    # address far more than three times (execution/confirmations.py).
    "ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY": 1_000_000,
    "ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY": 1_000_000,
}
# The recognition window the "old replay" case outlives.
SHORT_WINDOW_SECONDS = 0.3

PROFILES: dict[str, dict[str, bool]] = {
    "idempotency-keys": {"idempotency_keys": True, "unique_external_ref": False, "lookup": False},
    "unique-ref+lookup": {"idempotency_keys": False, "unique_external_ref": True, "lookup": True},
    "lookup-only": {"idempotency_keys": False, "unique_external_ref": False, "lookup": True},
    "nothing": {"idempotency_keys": False, "unique_external_ref": False, "lookup": False},
}


@dataclass(frozen=True)
class Counts:
    records: int
    tasks: int
    emails: int
    cases: int

    def __str__(self) -> str:
        return f"{self.records}/{self.tasks}/{self.emails}/{self.cases}"


DONE = Counts(1, 1, 1, 0)


@dataclass
class Cell:
    case: str
    profile: str
    expected: Counts
    observed: Counts | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return not self.problems and self.observed == self.expected


@dataclass
class DrillContext:
    run: str
    # The CRM's /_sandbox/ controls (the sandbox's, or the vendor emulator's).
    control: httpx.Client
    source_name: str
    crm: Destination
    profile: str
    # What the CRM's adapter can recognise of a repeat (`recognition_of`).
    recognition: str = "recognises"
    cluster: bool = False
    events: list[Event] = field(default_factory=list)
    # The mail sink's controls (the sandbox's; None: the same as `control`).
    mail_control: httpx.Client | None = None

    def ingest(self, label: str, *, email: str = "") -> Event:
        payload = {
            "form": "contact",
            "contact": {"name": "Drill Customer", "email": email or self.email},
            "message": f"Drill {label}",
        }
        source, _ = source_get_or_create(name=self.source_name)
        event = event_ingest(
            source=source, key=f"{self.run}-{label}-{uuid.uuid4().hex[:8]}", payload=payload
        ).event
        self.events.append(event)
        return event

    @property
    def email(self) -> str:
        """One customer's address per run. Named by a digest of the run, not the run
        itself: the run's name passes the 64 characters of an address's local part
        (RFC 5321, 4.5.3.1.1) and the 80 of Salesforce's Email field."""
        return f"drill-{uuid.uuid5(uuid.NAMESPACE_URL, self.run).hex[:16]}@example.com"

    def fault(self, action: str, mode: str, times: int = 1) -> None:
        control = (
            self.mail_control if action == "send_email" and self.mail_control else self.control
        )
        control.post(
            "/_sandbox/faults", json={"action": action, "mode": mode, "times": times}
        ).raise_for_status()

    def operations(self) -> Any:
        return Operation.objects.filter(event__in=self.events)

    def settle(self, timeout: float = 60) -> None:
        """Runs a scoped sweeper, and the engine (here, or in the drill's cluster),
        until nothing is left to do."""
        deadline = time.monotonic() + timeout
        handed: dict[int, Any] = {}  # operation -> the due time it was queued for
        while time.monotonic() < deadline:
            operations_sweep(scope=self.operations())
            now = timezone.now()
            due = list(
                self.operations()
                .filter(status__in=Operation.CLAIMABLE, next_attempt_at__lte=now)
                .values_list("pk", "next_attempt_at")
            )
            for operation_id, due_at in due:
                if not self.cluster:
                    operation_execute(operation_id=operation_id)
                elif handed.get(operation_id) != due_at:
                    # Once per due time: the cluster's workers claim it (or find it
                    # taken) and queue the steps it releases on their own queue.
                    handed[operation_id] = due_at
                    with tasks_queued_to(DRILL_WORKERS_QUEUE):
                        operation_enqueue(operation_id)
            busy = (
                self.operations()
                .filter(
                    Q(status__in=[Operation.Status.RUNNING, Operation.Status.RETRY_SCHEDULED])
                    | Q(status=Operation.Status.PENDING, next_attempt_at__isnull=False)
                )
                .exists()
            )
            if not busy:
                return
            time.sleep(0.02)
        raise TimeoutError("the drill's operations did not settle")

    def run_step(self, event: Event, step: str) -> None:
        operation = event.operations.get(step=step)
        operation_execute(operation_id=operation.pk)

    def crash_after_claim(self, event: Event, step: str, *, after_call: bool) -> None:
        """A worker claims the step, maybe calls the destination, then dies silently."""
        operation = event.operations.get(step=step)
        claim = operation_claim(operation_id=operation.pk)
        if claim is None:
            raise RuntimeError(f"could not claim {step} of {event.pk}")
        if after_call:
            perform_claimed(claim)
        # The lease runs out while nobody holds it (time travel, not sleep).
        Operation.objects.filter(pk=operation.pk).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )

    def replay_everything(self, event: Event) -> int:
        """An admin tries to replay each operation; returns how many were refused."""
        refused = 0
        for operation in event.operations.all():
            try:
                operation_replay(
                    operation_id=operation.pk,
                    actor=drill_user(),
                    reason="drill: replay after completion",
                )
            except ReplayRefusedError:
                refused += 1
        return refused

    def record_of(self, event: Event) -> str:
        return event.operations.get(step="create_enquiry").destination_ref

    def staff_change(self, record_id: str) -> None:
        """Someone edits the record in the CRM, behind Onefold's back."""
        if self.crm.kind == Destination.Kind.CRM_HTTP:
            self.control.patch(
                f"/crm/records/{record_id}", json={"name": "Renamed by staff"}
            ).raise_for_status()
            return
        crm = crm_adapter_for(self.crm)
        crm.update_record(record_id=record_id, fields={"message": "Changed by staff"})

    def staff_remove(self, record_id: str) -> None:
        """Someone deletes the record in the CRM, behind Onefold's back."""
        if self.crm.kind == Destination.Kind.CRM_HTTP:
            self.control.delete(f"/crm/records/{record_id}").raise_for_status()
            return
        setup = VENDOR_SETUP.get(str(self.crm.kind))
        remove = setup.remove if setup else _unsupported_remove
        remove(self.control, crm_adapter_for(self.crm), record_id)


def expect(condition: bool, failure: str) -> None:
    if not condition:
        raise DrillScenarioError(failure)


class DrillScenarioError(Exception):
    """A scenario saw something Onefold promises cannot happen."""


# --- the cases ----------------------------------------------------------------
# Each takes the context and returns the counts Onefold promises for its profile.


def case_failure_before_creation(ctx: DrillContext) -> Counts:
    ctx.fault("create_record", "fail_before_commit")
    ctx.ingest("before-creation")
    ctx.settle()
    # A 500 cannot tell "failed before commit" from "failed after": without any
    # way to recognise a repeat, a person decides; a lagging lookup that finds
    # nothing proves nothing, so a person decides there too.
    return Counts(0, 0, 0, 1) if ctx.recognition in ("nothing", "lagging") else DONE


def case_creation_answer_lost(ctx: DrillContext) -> Counts:
    ctx.fault("create_record", "drop_response_after_commit")
    ctx.ingest("answer-lost")
    ctx.settle()
    return Counts(1, 0, 0, 1) if ctx.recognition == "nothing" else DONE


def case_crash_between_creation_and_task(ctx: DrillContext) -> Counts:
    event = ctx.ingest("crash-after-create")
    ctx.crash_after_claim(event, "create_enquiry", after_call=True)
    ctx.settle()
    return Counts(1, 0, 0, 1) if ctx.recognition == "nothing" else DONE


def case_crash_between_task_and_email(ctx: DrillContext) -> Counts:
    event = ctx.ingest("crash-after-task")
    ctx.run_step(event, "create_enquiry")
    ctx.crash_after_claim(event, "assign_task", after_call=True)
    ctx.settle()
    return Counts(1, 1, 0, 1) if ctx.recognition == "nothing" else DONE


def case_crash_while_sending(ctx: DrillContext) -> Counts:
    event = ctx.ingest("crash-sending")
    ctx.run_step(event, "create_enquiry")
    ctx.run_step(event, "assign_task")
    # SENDING was recorded (the claim), then the worker vanished: at most once.
    ctx.crash_after_claim(event, "send_confirmation", after_call=False)
    ctx.settle()
    return Counts(1, 1, 0, 1)


def case_email_answer_lost(ctx: DrillContext) -> Counts:
    ctx.fault("send_email", "drop_response_after_commit")
    ctx.ingest("smtp-answer-lost")
    ctx.settle()
    return Counts(1, 1, 1, 1)


def case_replay_after_completion(ctx: DrillContext) -> Counts:
    event = ctx.ingest("replay-after-done")
    ctx.settle()
    repeat = event_ingest(source=event.source, key=event.key, payload=event.payload or {})
    expect(not repeat.created, "a repeat delivery created a new event")
    expect(ctx.replay_everything(event) == 3, "a replay of a succeeded operation was accepted")
    ctx.settle()
    return DONE


def case_simultaneous_attempts(ctx: DrillContext) -> Counts:
    event = ctx.ingest("simultaneous")
    for step in ("create_enquiry", "assign_task", "send_confirmation"):
        operation_id = event.operations.get(step=step).pk
        barrier = threading.Barrier(3)

        def attempt(barrier: threading.Barrier = barrier, operation_id: int = operation_id) -> None:
            try:
                barrier.wait()
                operation_execute(operation_id=operation_id)
            finally:
                connection.close()

        threads = [threading.Thread(target=attempt) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    ctx.settle()
    return DONE


def case_two_genuine_events(ctx: DrillContext) -> Counts:
    ctx.ingest("genuine-1")
    ctx.ingest("genuine-2")
    ctx.settle()
    return Counts(2, 2, 2, 0)


def case_record_changed_before_replay(ctx: DrillContext) -> Counts:
    event = ctx.ingest("changed")
    ctx.settle()
    ctx.staff_change(ctx.record_of(event))
    expect(ctx.replay_everything(event) == 3, "a replay of a succeeded operation was accepted")
    ctx.settle()
    return DONE


def case_record_removed_before_replay(ctx: DrillContext) -> Counts:
    event = ctx.ingest("removed")
    ctx.settle()
    ctx.staff_remove(ctx.record_of(event))
    # What the removal left: the sandbox removes the record's tasks with it; in
    # HubSpot, Pipedrive or Salesforce a task outlives its deal or lead.
    tasks_left = ctx.control.get("/_sandbox/stats").json()["tasks"]
    expect(tasks_left <= 1, f"{tasks_left} tasks after one enquiry")
    # Onefold never recreates a record someone removed; reconciliation reports it.
    expect(ctx.replay_everything(event) == 3, "a replay of a succeeded operation was accepted")
    ctx.settle()
    return Counts(0, tasks_left, 1, 0)


def case_task_replayed_after_record_removed(ctx: DrillContext) -> Counts:
    ctx.fault("create_task", "http_400")
    event = ctx.ingest("task-after-removal")
    ctx.settle()
    task = event.operations.get(step="assign_task")
    expect(task.status == Operation.Status.NEEDS_REVIEW, "a refused task was not put to review")
    ctx.staff_remove(ctx.record_of(event))
    # The replay is allowed (the refusal was certain) and runs with the original key,
    # but the record it belongs to is gone: the CRM refuses, and a person decides.
    # Onefold never recreates the removed record to hang the task on.
    operation_replay(operation_id=task.pk, actor=drill_user(), reason="drill: CRM fixed")
    ctx.settle()
    task.refresh_from_db()
    expect(
        task.status == Operation.Status.NEEDS_REVIEW, "the replayed task did not return to review"
    )
    return Counts(0, 0, 0, 1)


def case_old_replay_after_window(ctx: DrillContext) -> Counts:
    ctx.fault("create_record", "drop_response_after_commit")
    event = ctx.ingest("after-window")
    ctx.run_step(event, "create_enquiry")
    time.sleep(SHORT_WINDOW_SECONDS * 1.5)  # the retry comes after the window closed
    ctx.settle()
    if ctx.recognition in ("key", "nothing"):
        return Counts(1, 0, 0, 1)
    return DONE


CASES: dict[str, Callable[[DrillContext], Counts]] = {
    "failure before creation": case_failure_before_creation,
    "creation committed, answer lost": case_creation_answer_lost,
    "crash between creation and task": case_crash_between_creation_and_task,
    "crash between task and email": case_crash_between_task_and_email,
    "crash while sending email": case_crash_while_sending,
    "email accepted, SMTP answer lost": case_email_answer_lost,
    "replay after a completed run": case_replay_after_completion,
    "simultaneous attempts, one event": case_simultaneous_attempts,
    "two genuine events, one customer": case_two_genuine_events,
    "record changed before replay": case_record_changed_before_replay,
    "record removed before replay": case_record_removed_before_replay,
    "task replayed, its record removed": case_task_replayed_after_record_removed,
    "old replay after key window": case_old_replay_after_window,
}


# --- running --------------------------------------------------------------------


def drill_user() -> Any:
    """A system account for the drill's replay attempts (no usable password)."""
    User = get_user_model()
    user, created = User.objects.get_or_create(username=DRILL_USER, defaults={"is_active": True})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
        user.user_permissions.add(
            Permission.objects.get(
                content_type__app_label="idempotency_core", codename="replay_operation"
            )
        )
    return User.objects.get(pk=user.pk)  # fresh permission cache


@contextmanager
def _drill_cluster() -> Iterator[None]:
    """A django-q2 cluster of the drill's own, on its private queue, for the run."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of(settings.DATABASES["default"]),
        # An alternative cluster of this site (django-q2): same signing name, its own
        # queue, and none of the shared schedules.
        "Q_CLUSTER_NAME": DRILL_WORKERS_QUEUE,
        "ONEFOLD_Q_POLL": "0.05",
        # Its workers' results are kept (Q_CLUSTER saves none by default): the
        # drill's test counts them as proof that the cluster did the work.
        "ONEFOLD_Q_SAVE_LIMIT": "250",
        # The drill's retry timings; the HTTP and task timeouts stay the deployment's.
        **{
            name: str(value)
            for name, value in DRILL_TIMINGS.items()
            if name != "ONEFOLD_HTTP_TIMEOUT_SECONDS"
        },
    }
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(
            [sys.executable, str(settings.BASE_DIR / "manage.py"), "qcluster"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                log.seek(0)
                output = log.read()
                if " running." in output:
                    break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the drill's worker cluster did not start:\n{output}")
                time.sleep(0.1)
            yield
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            OrmQ.objects.filter(key=DRILL_WORKERS_QUEUE).delete()


@contextmanager
def _private_sandbox() -> Iterator[SandboxServer]:
    server = SandboxServer(http_port=0, smtp_port=0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _observe(ctx: DrillContext) -> tuple[Counts, list[str]]:
    stats = ctx.control.get("/_sandbox/stats").json()
    mail = ctx.mail_control.get("/_sandbox/stats").json() if ctx.mail_control else stats
    problems = []
    for source, name in (
        (stats, "records_by_external_ref"),
        (stats, "tasks_by_external_ref"),
        (mail, "messages_by_message_id"),
    ):
        for ref, count in source.get(name, {}).items():
            if count > 1:
                problems.append(f"duplicate: {count} effects for {ref}")
    open_cases = ReviewCase.objects.filter(
        event__in=ctx.events, status__in=ReviewCase.OPEN_STATUSES
    )
    for operation in ctx.operations():
        if operation.status in Operation.DONE:
            continue
        if operation.status != Operation.Status.NEEDS_REVIEW:
            problems.append(f"{operation.step} left {operation.status}, not visible for review")
        elif operation.held_by_id is None:
            if not open_cases.filter(operation=operation).exists():
                problems.append(f"{operation.step} needs review but has no open case")
        elif not any(
            operation.pk in case.held_operation_ids
            for case in open_cases.filter(operation_id=operation.held_by_id)
        ):
            problems.append(f"{operation.step} is held, but no open case names it")
    counts = Counts(stats["records"], stats["tasks"], mail["messages"], open_cases.count())
    return counts, problems


def recognition_of(capabilities: Capabilities) -> str:
    """What the drill expects of a CRM with these capabilities after an unclear create:

    "recognises": a repeat is recognised at any age (unique reference, a lookup
    whose "not found" proves absence, an idempotency key kept forever);
    "key": only within the idempotency key's window; "lagging": a lookup that
    lags writes (found: adopted; not found: a case); "nothing": a case."""
    if capabilities.unique_external_ref or (
        capabilities.lookup and capabilities.lookup_proves_absence
    ):
        return "recognises"
    if capabilities.idempotency_keys:
        return "recognises" if capabilities.key_retention is None else "key"
    if capabilities.lookup:
        return "lagging"
    return "nothing"


@dataclass(frozen=True)
class VendorSetup:
    """What the drill needs to run a vendor's emulator as its CRM.

    `env`: the variables its adapter reads, pointing at the running emulator
    with the emulator's own credentials (from the vendor package's docstring);
    the drill sets those that are unset, for the run. `remove`: what staff do
    to delete a record behind Onefold's back, through the vendor's documented
    DELETE path (the emulator's control client, the adapter, the record id)."""

    env: Callable[[Any], dict[str, str]]
    remove: Callable[[httpx.Client, Any, str], None]


def _unsupported_remove(control: httpx.Client, adapter: Any, record_id: str) -> None:
    raise DrillScenarioError("the drill has no staff removal for this vendor")


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _hubspot_remove(control: httpx.Client, adapter: Any, record_id: str) -> None:
    # DELETE /crm/v3/objects/{objectType}/{objectId} archives the object
    # (https://developers.hubspot.com/docs/api/crm/deals, "Archive").
    control.delete(
        f"/crm/v3/objects/{adapter.object_type}/{record_id}",
        headers=_bearer(os.environ["HUBSPOT_TOKEN"]),
    ).raise_for_status()


def _salesforce_remove(control: httpx.Client, adapter: Any, record_id: str) -> None:
    # OAuth client credentials, then DELETE /services/data/vXX.X/sobjects/{object}/{id}
    # (https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/dome_delete_record.htm).
    token = control.post(
        "/services/oauth2/token",
        data={
            "grant_type": "client_credentials",
            "client_id": os.environ["SALESFORCE_CLIENT_ID"],
            "client_secret": os.environ["SALESFORCE_CLIENT_SECRET"],
        },
    )
    token.raise_for_status()
    control.delete(
        f"/services/data/v{adapter.config.api_version}/sobjects/{adapter.config.sobject}/{record_id}",
        headers=_bearer(token.json()["access_token"]),
    ).raise_for_status()


def _pipedrive_remove(control: httpx.Client, adapter: Any, record_id: str) -> None:
    # DELETE /v1/leads/{id} (https://developers.pipedrive.com/docs/api/v1/Leads#deleteLead).
    control.delete(
        f"/v1/leads/{record_id}", headers={"x-api-token": os.environ["PIPEDRIVE_API_TOKEN"]}
    ).raise_for_status()


def _dataverse_remove(control: httpx.Client, adapter: Any, record_id: str) -> None:
    # Client credentials at the tenant's token endpoint, then DELETE /api/data/v9.2/leads(<id>)
    # (https://learn.microsoft.com/power-apps/developer/data-platform/webapi/update-delete-entities-using-web-api).
    token = control.post(
        os.environ["DATAVERSE_TOKEN_URL"],
        data={
            "grant_type": "client_credentials",
            "client_id": os.environ["DATAVERSE_CLIENT_ID"],
            "client_secret": os.environ["DATAVERSE_CLIENT_SECRET"],
            "scope": f"{os.environ['DATAVERSE_URL'].rstrip('/')}/.default",
        },
    )
    token.raise_for_status()
    control.delete(
        f"/api/data/v9.2/leads({record_id})", headers=_bearer(token.json()["access_token"])
    ).raise_for_status()


VENDOR_SETUP: dict[str, VendorSetup] = {
    # The emulator takes only its own token (lab/emulators/hubspot.py).
    "hubspot": VendorSetup(env=lambda emulator: emulator.adapter_env(), remove=_hubspot_remove),
    "salesforce": VendorSetup(
        env=lambda emulator: emulator.adapter_env(), remove=_salesforce_remove
    ),
    # The adapter's default settle delay is 30 s; the emulator's search lags 1 s.
    "pipedrive": VendorSetup(
        env=lambda emulator: {**emulator.adapter_env(), "PIPEDRIVE_SETTLE_SECONDS": "3"},
        remove=_pipedrive_remove,
    ),
    # The token endpoint takes only the app registration it knows (lab/emulators/dataverse.py).
    "dataverse": VendorSetup(env=lambda emulator: emulator.adapter_env(), remove=_dataverse_remove),
}


class DrillDestinationError(Exception):
    """The drill cannot run against that destination (no emulator or adapter here)."""


def drill_destinations() -> tuple[str, ...]:
    return ("sandbox", *CRM_VENDORS)


@contextmanager
def _crm_under_drill(destination: str, sandbox: SandboxServer) -> Iterator[tuple[str, str]]:
    """(kind, base URL) of the CRM the drill talks to; a vendor's emulator runs meanwhile,
    with its adapter's variables set for the run where unset."""
    if destination == "sandbox":
        yield Destination.Kind.CRM_HTTP, sandbox.http_url
        return
    if destination not in CRM_VENDORS:
        raise DrillDestinationError(
            f"unknown destination {destination!r}; choose from {', '.join(drill_destinations())}"
        )
    try:
        emulator: EmulatorServer = emulator_class(destination)()
    except EmulatorUnavailableError as exc:
        raise DrillDestinationError(f"cannot drill {destination}: {exc}") from exc
    setup = VENDOR_SETUP.get(destination)
    with emulator:
        supplied = setup.env(emulator) if setup else {}
        previous = {name: os.environ.get(name) for name in supplied}
        os.environ.update({k: v for k, v in supplied.items() if previous[k] is None})
        try:
            yield destination, emulator.http_url
        finally:
            for name, value in previous.items():
                if value is None:
                    os.environ.pop(name, None)


def drill_run(
    *,
    cases: list[str] | None = None,
    profiles: list[str] | None = None,
    progress: Callable[[Cell], None] | None = None,
    cluster: bool = False,
    destination: str = "sandbox",
) -> list[Cell]:
    run = timezone.now().strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:4]
    cells: list[Cell] = []
    with (
        _private_sandbox() as sandbox,
        _crm_under_drill(destination, sandbox) as (kind, crm_url),
        httpx.Client(base_url=crm_url, timeout=30) as control,
        httpx.Client(base_url=sandbox.http_url, timeout=30) as mail_control,
        settings_overridden(**DRILL_TIMINGS),
        tasks_queued_to(DRILL_QUEUE),
        _drill_cluster() if cluster else nullcontext(),
    ):
        crm = Destination.objects.create(name=f"drill-crm-{run}", kind=kind, base_url=crm_url)
        mailer = Destination.objects.create(
            name=f"drill-mail-{run}",
            kind=Destination.Kind.SMTP,
            base_url=f"127.0.0.1:{sandbox.smtp_port}",
        )
        source, _ = source_get_or_create(name=f"drill-{run}")
        source.crm, source.mailer = crm, mailer
        source.save(update_fields=["crm", "mailer"])
        chosen = (
            {name: flags for name, flags in PROFILES.items() if not profiles or name in profiles}
            if destination == "sandbox"
            else {destination: None}
        )
        try:
            for case_name, case in CASES.items():
                if cases and case_name not in cases:
                    continue
                for profile_name, flags in chosen.items():
                    cell = _run_cell(
                        run=run,
                        control=control,
                        mail_control=mail_control,
                        crm=crm,
                        source_name=source.name,
                        case_name=case_name,
                        case=case,
                        profile_name=profile_name,
                        flags=flags,
                        cluster=cluster,
                    )
                    cells.append(cell)
                    if progress:
                        progress(cell)
        finally:
            OrmQ.objects.filter(key=DRILL_QUEUE).delete()
            # The drill's source and destinations stay as evidence, out of use.
            Source.objects.filter(pk=source.pk).update(is_active=False)
    return cells


def _run_cell(
    *,
    run: str,
    control: httpx.Client,
    mail_control: httpx.Client,
    source_name: str,
    crm: Destination,
    case_name: str,
    case: Callable[[DrillContext], Counts],
    profile_name: str,
    flags: dict[str, bool] | None,
    cluster: bool,
) -> Cell:
    control.post("/_sandbox/reset").raise_for_status()
    if flags is not None:  # the sandbox: switched to the profile
        window = SHORT_WINDOW_SECONDS if case is case_old_replay_after_window else 86400
        control.post(
            "/_sandbox/capabilities", json={**flags, "idempotency_key_ttl_seconds": window}
        ).raise_for_status()
    else:
        mail_control.post("/_sandbox/reset").raise_for_status()
    ctx = DrillContext(
        run=f"{run}-{case.__name__.removeprefix('case_')}-{profile_name}",
        control=control,
        source_name=source_name,
        crm=crm,
        profile=profile_name,
        recognition=recognition_of(adapter_for(crm).capabilities),
        cluster=cluster,
        mail_control=mail_control,
    )
    cell = Cell(case=case_name, profile=profile_name, expected=DONE)
    try:
        cell.expected = case(ctx)
    except Exception as exc:  # a broken cell is reported, not fatal to the drill
        cell.problems.append(f"scenario error: {type(exc).__name__}: {exc}")
    cell.observed, problems = _observe(ctx)
    cell.problems.extend(problems)
    return cell


def drill_table(cells: list[Cell]) -> str:
    header = f"{'case':34} {'profile':18} {'expected':>9} {'observed':>9}  verdict"
    lines = [header, "-" * len(header)]
    for cell in cells:
        verdict = "ok" if cell.holds else "FAIL " + "; ".join(cell.problems or ["counts differ"])
        lines.append(
            f"{cell.case:34} {cell.profile:18} {cell.expected!s:>9} {cell.observed!s:>9}  {verdict}"
        )
    lines.append("")
    lines.append("counts are records/tasks/emails/open review cases")
    return "\n".join(lines)


def drill_matrix(cells: list[Cell]) -> str:
    """One row per case, one column per profile (or vendor): the observed counts,
    marked ok or FAIL, as a Markdown table the README can take."""
    profiles = list(dict.fromkeys(cell.profile for cell in cells))
    by_case: dict[str, dict[str, Cell]] = {}
    for cell in cells:
        by_case.setdefault(cell.case, {})[cell.profile] = cell
    lines = [
        "| case | " + " | ".join(profiles) + " |",
        "| --- |" + " --- |" * len(profiles),
    ]
    for case, row in by_case.items():
        marks = [
            f"{row[p].observed} {'ok' if row[p].holds else 'FAIL'}" if p in row else ""
            for p in profiles
        ]
        lines.append(f"| {case} | " + " | ".join(marks) + " |")
    return "\n".join(lines)
