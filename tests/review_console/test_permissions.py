"""Who reaches what: every console page and action, for every role.

Anonymous users are sent to the login page, non-staff users get 403 even when
they hold the Reviewers permissions, Reviewers do everything but a replay that
could duplicate (pages and API alike) and bulk replay, Replay admins and
superusers do everything. Actions answer GET with 405 and refuse a
POST without a CSRF token.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import (
    AuditEntry,
    Destination,
    Operation,
    ReconciliationRun,
    ReviewCase,
    Source,
)
from review_console.models import BulkReplayJob, CauseHold
from tests.factories import ROLES, duplicate_case, permanent_case

pytestmark = pytest.mark.django_db

# (name, kind of case, which role set may use it)
PAGES = [
    ("console:dashboard", None, "view"),
    ("console:case-list", None, "view"),
    ("console:case-detail", "permanent", "view"),
    ("console:case-compare", "duplicate", "change"),
    ("console:audit-list", None, "view"),
    ("console:audit-export", None, "view"),
    ("console:api-case-list", None, "view"),
    ("console:api-case-detail", "permanent", "view"),
    ("console:bulk-replay-detail", "bulk_job", "view"),
    ("console:api-bulk-replay-detail", "bulk_job", "view"),
    ("console:reconciliation-runs", None, "view"),
    ("console:reconciliation-run", "reconciliation_run", "view"),
    ("console:source-list", None, "view"),
    ("console:source-detail", "source", "view"),
]
ACTIONS = [
    # POST without confirm: the confirmation page (200) or a redirect (302).
    ("console:case-take", None, "change", 302),
    ("console:case-lookup", "permanent", "change", 302),
    # A refused step: the engine proves a try safe, so Reviewers may ask for it.
    ("console:case-replay", "permanent", "change", 200),
    ("console:case-resolve", "permanent", "change", 200),
    ("console:case-close", "permanent", "change", 200),
    # An incomplete merge form: the compare page again, with what was typed kept.
    ("console:case-merge", "duplicate", "change", 200),
    ("console:case-not-duplicate", "duplicate", "change", 200),
    ("console:bulk-replay-new", None, "replay", 200),
    ("console:source-disable", "source", "source", 200),
    ("console:source-enable", "source", "source", 200),
    ("console:source-secret-add", "source", "source", 200),
    ("console:source-secret-remove", "source", "source", 200),
    # A reviewer's day: the next case, several settled from the queue, reopen,
    # and contact details revealed with a reason (those who see them anyway go back).
    ("console:case-next", None, "change", 302),
    ("console:cases-settle", None, "change", 302),
    ("console:case-reopen", "closed", "change", 200),
    ("console:case-reveal", "permanent", "change", {"superuser": 302, None: 200}),
    # A cause's group: one decision for all its cases, and a hold stopped.
    ("console:cause-settle", None, "change", 302),
    ("console:cause-hold-stop", "hold", "change", 302),
]
ALLOWED = {
    "view": {"reviewer", "replay_admin", "superuser"},
    "change": {"reviewer", "replay_admin", "superuser"},
    "replay": {"replay_admin", "superuser"},
    # idempotency_core.change_source: no group holds it (superusers, or given per user).
    "source": {"superuser"},
}


def expected(ok_status: int | dict, role: str) -> int:
    """The status an allowed role gets: one for all, or by role (None: the others)."""
    if isinstance(ok_status, dict):
        return ok_status.get(role, ok_status[None])
    return ok_status


def client_for(users, role: str, **kwargs) -> Client:
    client = Client(**kwargs)
    if users[role] is not None:
        client.force_login(users[role])
    return client


def url_for(name: str, obj: object) -> str:
    if obj is None:
        return reverse(name)
    if name.startswith("console:api-"):
        key = "pk"
    else:
        key = {
            BulkReplayJob: "job_id",
            ReconciliationRun: "run_id",
            Source: "source_id",
            CauseHold: "hold_id",
        }.get(type(obj), "case_id")
    return reverse(name, kwargs={key: obj.pk})


def make_case(kind: str | None, sandbox) -> object:
    """The object a page or action is about (a case, mostly)."""
    if kind == "permanent":
        return permanent_case()
    if kind == "hold":
        owner = User.objects.create_user("hold-owner", is_staff=True)
        return CauseHold.objects.create(
            kind="permanent_failure",
            step="create_enquiry",
            destination=Destination.objects.get(name="crm"),
            resolution_code="spam_or_test",
            reason="spam wave",
            created_by=owner,
            until=timezone.now() + timedelta(hours=4),
        )
    if kind == "closed":
        closed = permanent_case("closed-1")
        ReviewCase.objects.filter(pk=closed.pk).update(status="closed", resolution_code="other")
        return closed
    if kind == "duplicate":
        return duplicate_case(sandbox)
    if kind == "bulk_job":
        admin = User.objects.create_user("job-owner", is_staff=True)
        return BulkReplayJob.objects.create(created_by=admin, reason="CRM fixed")
    if kind == "reconciliation_run":
        now = timezone.now()
        return ReconciliationRun.objects.create(
            destination=Destination.objects.get(name="crm"),
            since=now - timedelta(days=1),
            until=now,
            as_of=now,
            listing_since=now - timedelta(days=1),
            listing_until=now,
        )
    if kind == "source":
        source, _ = source_get_or_create(name="typeform-site")
        source_hook_configure(
            source=source,
            profile="typeform",
            secrets=["a-signing-secret-long-enough-for-hmac-sha256"],
        )
        return source
    return None


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("name", "kind", "needs"), PAGES)
def test_pages_by_role(users, sandbox, role, name, kind, needs):
    url = url_for(name, make_case(kind, sandbox))
    response = client_for(users, role).get(url)
    if role in ALLOWED[needs]:
        assert response.status_code == 200, response.content[:500]
    elif name.startswith("console:api-"):
        # DRF with session auth answers 403 to anonymous users too (no login page for scripts).
        assert response.status_code == 403
    elif role == "anonymous":
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")
    else:
        assert response.status_code == 403


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("name", "kind", "needs", "ok_status"), ACTIONS)
def test_actions_by_role(users, sandbox, role, name, kind, needs, ok_status):
    case = make_case(kind, sandbox)
    url = url_for(name, case)
    data: dict = {}
    if name == "console:case-take":
        data = {"case": [permanent_case("take-1").pk]}
    if name == "console:cases-settle":
        data = {"case": [permanent_case("settle-1").pk], "preset": "spam_or_test"}
    before = AuditEntry.objects.count()
    response = client_for(users, role).post(url, data)
    if role in ALLOWED[needs]:
        assert response.status_code == expected(ok_status, role), response.content[:500]
    elif role == "anonymous":
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    else:
        assert response.status_code == 403
        assert AuditEntry.objects.count() == before, "a refused request must decide nothing"


@pytest.mark.parametrize(("name", "kind", "needs", "ok_status"), ACTIONS)
@pytest.mark.parametrize("role", ["reviewer", "superuser"])
def test_get_on_an_action_is_405(users, sandbox, role, name, kind, needs, ok_status):
    url = url_for(name, make_case(kind, sandbox))
    assert client_for(users, role).get(url).status_code == 405


API_ACTIONS = [
    ("take", {}, "change"),
    ("lookup", {}, "change"),
    ("resolve", {"destination_ref": "x", "reason": "r"}, "change"),
    ("close", {"resolution_code": "other", "reason": "r"}, "change"),
    ("not-duplicate", {"reason": "r"}, "change"),
    ("merge", {"survivor": "rec_1", "duplicate": "rec_2", "reason": "r"}, "change"),
    # A refused step: the engine proves a try safe, so Reviewers may ask for it, as on
    # the case page.
    ("replay", {"reason": "r"}, "change"),
]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("action", "body", "needs"), API_ACTIONS)
def test_api_actions_by_role(users, sandbox, role, action, body, needs):
    case = permanent_case()
    before = AuditEntry.objects.count()
    response = client_for(users, role).post(
        f"/console/api/cases/{case.pk}/{action}/", body, content_type="application/json"
    )
    if role in ALLOWED[needs]:
        # Allowed through; the service may still refuse the case's state (409) or the
        # body (400: a permanent-failure case has no duplicates to merge).
        assert response.status_code in (200, 400, 409), response.content[:500]
    else:
        assert response.status_code == 403
        assert AuditEntry.objects.count() == before, "a refused request must decide nothing"


@pytest.mark.parametrize(("action", "body", "needs"), API_ACTIONS)
def test_get_on_an_api_action_is_405(users, action, body, needs):
    case = permanent_case()
    response = client_for(users, "superuser").get(f"/console/api/cases/{case.pk}/{action}/")
    assert response.status_code == 405


def test_the_api_replay_goes_through_the_service_guards(users):
    case = permanent_case()
    client = client_for(users, "replay_admin")
    url = f"/console/api/cases/{case.pk}/replay/"
    assert client.post(url, {}, content_type="application/json").status_code == 400
    response = client.post(url, {"reason": "CRM fixed"}, content_type="application/json")
    assert response.status_code == 200, response.content
    # Resolved only when the replayed attempt works; until then it is in progress.
    assert response.json()["status"] == "in_progress"
    assert response.json()["operation"]["status"] == "retry_scheduled"
    again = client.post(url, {"reason": "twice"}, content_type="application/json")
    assert again.status_code == 409
    assert "already scheduled" in again.json()["detail"]


@pytest.mark.parametrize(("name", "kind", "needs", "ok_status"), ACTIONS)
def test_csrf_is_enforced_on_actions(users, sandbox, name, kind, needs, ok_status):
    case = make_case(kind, sandbox)
    client = client_for(users, "superuser", enforce_csrf_checks=True)
    url = url_for(name, case)
    data = {"case": [permanent_case("csrf-take").pk]} if name == "console:case-take" else {}
    assert client.post(url, data).status_code == 403
    client.get(reverse("console:dashboard"))  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = client.post(url, {**data, "csrfmiddlewaretoken": token})
    assert response.status_code == expected(ok_status, "superuser")


def test_csrf_is_enforced_on_the_api(users):
    case = permanent_case()
    client = client_for(users, "superuser", enforce_csrf_checks=True)
    response = client.post(
        f"/console/api/cases/{case.pk}/take/", {}, content_type="application/json"
    )
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_contact_details_are_masked_without_the_permission(users):
    case = permanent_case()
    url = reverse("console:case-detail", args=[case.pk])
    masked = client_for(users, "reviewer").get(url).content.decode()
    assert "ada@example.com" not in masked and "Lovelace" not in masked
    assert "a***@example.com" in masked and "+44 ** **** 0000" in masked and "A. L." in masked
    users["reviewer"].user_permissions.add(Permission.objects.get(codename="view_contact_details"))
    unmasked = client_for(users, "reviewer").get(url).content.decode()
    assert "ada@example.com" in unmasked and "Ada Lovelace" in unmasked
    superuser_view = client_for(users, "superuser").get(url).content.decode()
    assert "ada@example.com" in superuser_view


def test_the_api_masks_contact_details_too(users):
    case = permanent_case()
    data = client_for(users, "reviewer").get(f"/console/api/cases/{case.pk}/").json()
    assert data["contact"]["email"] == "a***@example.com"
    data = client_for(users, "superuser").get(f"/console/api/cases/{case.pk}/").json()
    assert data["contact"]["email"] == "ada@example.com"


def test_a_reviewer_may_try_a_refused_step_again_through_the_api_as_on_the_page(users):
    page_case, api_case = permanent_case("parity-page"), permanent_case("parity-api")
    client = client_for(users, "reviewer")
    page = client.post(
        reverse("console:case-replay", args=[page_case.pk]),
        {"confirm": "yes", "reason": "The CRM field is fixed"},
    )
    assert page.status_code == 302
    response = client.post(
        f"/console/api/cases/{api_case.pk}/replay/",
        {"reason": "The CRM field is fixed"},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content[:500]
    assert response.json()["status"] == "in_progress"
    for case in (page_case, api_case):
        assert Operation.objects.get(pk=case.operation_id).status == "retry_scheduled"
        entry = AuditEntry.objects.get(action="replay", case=case)
        assert entry.actor == users["reviewer"] and entry.reason == "The CRM field is fixed"


def test_the_api_refuses_a_reviewer_a_replay_that_could_duplicate(users, ambiguous_case):
    case = ambiguous_case("api-amb")
    url = f"/console/api/cases/{case.pk}/replay/"
    body = {"reason": "I looked", "destination_checked": True}
    before = AuditEntry.objects.count()
    response = client_for(users, "reviewer").post(url, body, content_type="application/json")
    assert response.status_code == 403
    assert "Replay admin" in response.json()["detail"]
    assert AuditEntry.objects.count() == before, "a refused request must decide nothing"
    assert Operation.objects.get(pk=case.operation_id).status == Operation.Status.NEEDS_REVIEW
    # A Replay admin passes the gate and meets the service's own guard instead.
    admin = client_for(users, "replay_admin").post(url, body, content_type="application/json")
    assert admin.status_code == 409, admin.content[:500]
    assert "Look it up first" in admin.json()["detail"]


def test_a_reviewer_sees_no_replay_button_where_a_try_could_duplicate(users, ambiguous_case):
    case = ambiguous_case("perm-amb")
    url = reverse("console:case-detail", args=[case.pk])
    reviewer_page = client_for(users, "reviewer").get(url).content.decode()
    admin_page = client_for(users, "replay_admin").get(url).content.decode()
    replay_url = reverse("console:case-replay", args=[case.pk])
    assert replay_url not in reviewer_page
    assert "Trying again needs the Replay admins role" in reviewer_page
    assert replay_url in admin_page


@pytest.mark.parametrize("role", ROLES)
def test_api_bulk_replay_by_role(users, role):
    permanent_case()
    response = client_for(users, role).post(
        "/console/api/bulk-replays/",
        {"filter": {"kind": ["permanent_failure"]}, "reason": "CRM fixed"},
        content_type="application/json",
    )
    if role in ALLOWED["replay"]:
        assert response.status_code == 202, response.content[:500]
        job = response.json()
        assert (job["status"], job["reason"]) == ("queued", "CRM fixed")
        assert job["filter_params"] == {"kind": ["permanent_failure"]}
        progress = client_for(users, role).get(f"/console/api/bulk-replays/{job['id']}/")
        assert progress.status_code == 200
    else:
        assert response.status_code == 403


def test_api_bulk_replay_refuses_a_bad_filter_or_no_reason(users):
    client = client_for(users, "replay_admin")
    bad = client.post(
        "/console/api/bulk-replays/",
        {"filter": {"kind": ["no_such_kind"]}, "reason": "x"},
        content_type="application/json",
    )
    assert bad.status_code == 400 and "filter" in bad.json()["errors"]
    empty = client.post(
        "/console/api/bulk-replays/", {"reason": " "}, content_type="application/json"
    )
    assert empty.status_code in (400, 409)
