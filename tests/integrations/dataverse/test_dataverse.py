"""The Dataverse adapter against the Dataverse emulator over real HTTP on loopback.

One emulator per module (port 0), reset before each test; it serves the Entra ID
token endpoint too, so every call here fetches and presents a real bearer token.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from integrations.base import Classification, CrmAdapter, DestinationError, RateLimit
from integrations.dataverse.adapter import (
    API_PATH,
    DataverseCrm,
    adapter_from_env,
    record_guid,
)
from lab.emulators.dataverse import DataverseEmulator

SECRET = "dv-secret-value-0123"
FIELDS = {
    "name": "Ada Lovelace",
    "email": "ada@example.com",
    "phone": "+44 20 7946 0000",
    "message": "Please quote for a kitchen refit.",
    "form": "contact",
    "source": "website",
    "submitted_at": "2026-11-29T10:15:00Z",
    "fields": {"budget": 5000},
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[DataverseEmulator]:
    with DataverseEmulator() as server:
        yield server


@pytest.fixture
def control(emulator: DataverseEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emulator.http_url, timeout=30) as http:
        assert http.post("/_sandbox/reset").status_code == 200
        configure(http, client_id="onefold-app", client_secret=SECRET)
        yield http


def env_for(emulator: DataverseEmulator, **extra: str) -> dict[str, str]:
    return {
        "DATAVERSE_URL": emulator.http_url,
        "DATAVERSE_CLIENT_ID": "onefold-app",
        "DATAVERSE_CLIENT_SECRET": SECRET,
        "DATAVERSE_TOKEN_URL": emulator.token_url,
        **extra,
    }


@pytest.fixture
def crm(emulator: DataverseEmulator, control: httpx.Client) -> DataverseCrm:
    return adapter_from_env(base_url=None, timeout=5, env=env_for(emulator))


def configure(control: httpx.Client, **settings: Any) -> None:
    response = control.post("/_sandbox/config", json=settings)
    assert response.status_code == 200, response.text


def fault(control: httpx.Client, action: str, mode: str, **options: Any) -> None:
    body = {"action": action, "mode": mode, **options}
    assert control.post("/_sandbox/faults", json=body).status_code == 200


def stats(control: httpx.Client) -> dict[str, Any]:
    return control.get("/_sandbox/stats").json()


def test_a_lead_is_created_under_the_guid_derived_from_the_key(crm: DataverseCrm, control) -> None:
    assert isinstance(crm, CrmAdapter)
    effect = crm.create_record(external_ref="opk_1", fields=FIELDS)
    assert effect.ref == record_guid("lead", "opk_1") == str(effect.ref).lower()
    assert str(uuid.UUID(effect.ref)) == effect.ref and uuid.UUID(effect.ref).version == 5
    assert not effect.adopted and effect.reply is not None and effect.reply.code == 204
    record = crm.get_record(effect.ref)
    assert record is not None
    assert record["external_ref"] == "opk_1"
    assert (record["name"], record["email"]) == ("Ada Lovelace", "ada@example.com")
    assert record["message"].startswith("Please quote for a kitchen refit.")
    assert "Form: contact" in record["message"] and "budget: 5000" in record["message"]
    assert record["created_at"].endswith("Z") and record["merged_into"] is None
    assert stats(control)["records_by_external_ref"] == {"opk_1": 1}


def test_a_lost_create_answer_is_adopted_by_412_with_one_lead(crm: DataverseCrm, control) -> None:
    fault(control, "create_record", "drop_response_after_commit")
    with pytest.raises(DestinationError) as lost:
        crm.create_record(external_ref="opk_1", fields=FIELDS)
    assert lost.value.classification == Classification.AMBIGUOUS
    repeat = crm.create_record(external_ref="opk_1", fields=FIELDS)
    assert repeat.adopted
    assert repeat.reply is not None and repeat.reply.code == 412
    assert repeat.ref == record_guid("lead", "opk_1")
    counts = stats(control)
    assert (counts["records"], counts["records_by_external_ref"]) == (1, {"opk_1": 1})


def test_a_lost_task_answer_is_adopted_by_412_with_one_task(crm: DataverseCrm, control) -> None:
    lead = crm.create_record(external_ref="opk_lead", fields=FIELDS).ref
    fault(control, "create_task", "http_500_after_commit")
    with pytest.raises(DestinationError) as failed:
        crm.create_task(record_id=lead, external_ref="opk_task", title="Call back", assignee="")
    assert failed.value.classification == Classification.AMBIGUOUS
    repeat = crm.create_task(
        record_id=lead, external_ref="opk_task", title="Call back", assignee=""
    )
    assert repeat.adopted and repeat.ref == record_guid("task", "opk_task")
    counts = stats(control)
    assert (counts["records"], counts["tasks"]) == (1, 1)
    assert counts["tasks_by_external_ref"] == {"opk_task": 1}
    assert crm.find_task(record_id=lead, external_ref="opk_task") == repeat.ref
    assert crm.find_task(record_id=lead, external_ref="opk_other") is None


def test_the_task_regards_its_lead_and_names_a_guid_assignee_as_owner(
    crm: DataverseCrm, control
) -> None:
    lead = crm.create_record(external_ref="opk_lead", fields=FIELDS).ref
    owner = str(uuid.uuid4())
    task = crm.create_task(record_id=lead, external_ref="opk_t", title="Call", assignee=owner)
    token = control_token(control)
    raw = control.get(
        f"{API_PATH}/tasks({task.ref})", headers={"Authorization": f"Bearer {token}"}
    ).json()
    assert raw["_regardingobjectid_value"] == lead
    assert raw["ownerid@odata.bind"] == f"/systemusers({owner})"
    assert raw["onefold_ref"] == "opk_t"


def control_token(control: httpx.Client) -> str:
    form = {
        "grant_type": "client_credentials",
        "client_id": "onefold-app",
        "client_secret": SECRET,
        "scope": f"{control.base_url}/.default",
    }
    return control.post("/emulator-tenant/oauth2/v2.0/token", data=form).json()["access_token"]


def test_a_lead_holding_the_key_under_another_guid_is_adopted(crm: DataverseCrm, control) -> None:
    """Created by hand (or by an older integration) with our key: the alternate key
    refuses a second one (412 naming the key) and the adapter finds and adopts it."""
    other = str(uuid.uuid4())
    token = control_token(control)
    made = control.patch(
        f"{API_PATH}/leads({other})",
        json={"lastname": "Imported", "onefold_ref": "opk_1"},
        headers={"Authorization": f"Bearer {token}", "If-None-Match": "*"},
    )
    assert made.status_code == 204
    effect = crm.create_record(external_ref="opk_1", fields=FIELDS)
    assert effect.adopted and effect.ref == other
    assert crm.find_record(external_ref="opk_1") == other
    assert stats(control)["records_by_external_ref"] == {"opk_1": 1}


def test_lookup_by_key_finds_the_lead_or_proves_it_absent(crm: DataverseCrm, control) -> None:
    assert crm.find_record(external_ref="opk_1") is None
    effect = crm.create_record(external_ref="opk_1", fields=FIELDS)
    assert crm.find_record(external_ref="opk_1") == effect.ref
    assert crm.find_record(external_ref="it's 'quoted'") is None


def test_an_update_changes_the_lead_and_never_creates_one(crm: DataverseCrm, control) -> None:
    guid = crm.create_record(external_ref="opk_1", fields=FIELDS).ref
    crm.update_record(record_id=guid, fields={**FIELDS, "name": "Ada King"})
    record = crm.get_record(guid)
    assert record is not None and record["name"] == "Ada King"
    assert record["external_ref"] == "opk_1"  # an edit keeps the reference
    missing = str(uuid.uuid4())
    with pytest.raises(DestinationError) as gone:
        crm.update_record(record_id=missing, fields=FIELDS)
    assert gone.value.classification == Classification.PERMANENT
    assert gone.value.reply is not None and gone.value.reply.code == 404
    assert stats(control)["records"] == 1


def test_references_are_guids_checked_before_any_call(crm: DataverseCrm, control) -> None:
    assert crm.reference_check(record_guid("lead", "x")) is None
    assert crm.reference_check("../../_sandbox/stats") is not None
    assert crm.reference_check("rec_000001") is not None
    with pytest.raises(DestinationError):
        crm.get_record("../../_sandbox/reset")
    assert crm.get_record(str(uuid.uuid4())) is None


def test_merge_deactivates_the_duplicate_moves_its_tasks_and_is_done_once(
    crm: DataverseCrm, control
) -> None:
    survivor = crm.create_record(external_ref="opk_a", fields=FIELDS).ref
    duplicate = crm.create_record(external_ref="opk_b", fields=FIELDS).ref
    crm.create_task(record_id=duplicate, external_ref="opk_bt", title="Call", assignee="")
    merged = crm.merge_records(survivor_id=survivor, duplicate_id=duplicate, key="opk_m")
    assert merged.ref == survivor and not merged.adopted
    again = crm.merge_records(survivor_id=survivor, duplicate_id=duplicate, key="opk_m")
    assert again.adopted and again.ref == survivor
    record = crm.get_record(duplicate)
    assert record is not None and record["merged_into"] == survivor
    counts = stats(control)
    assert (counts["records"], counts["tasks"]) == (1, 1)  # the task moved to the survivor


def test_listing_pages_by_next_link_and_resumes_from_a_cursor(crm: DataverseCrm, control) -> None:
    refs = [f"opk_{i}" for i in range(5)]
    for ref in refs:
        crm.create_record(external_ref=ref, fields=FIELDS)
    pages = list(crm.iter_records(since="2000-01-01T00:00:00+00:00", limit=2))
    assert [len(page) for page, _ in pages] == [2, 2, 1]
    assert [cursor is None for _, cursor in pages] == [False, False, True]
    listed = [record["external_ref"] for page, _ in pages for record in page]
    assert sorted(listed) == refs
    assert {"id", "external_ref", "created_at", "updated_at"} <= set(pages[0][0][0])
    resumed = list(crm.iter_records(since="2000-01-01T00:00:00Z", cursor=pages[0][1], limit=2))
    assert [r["external_ref"] for page, _ in resumed for r in page] == listed[2:]
    assert list(crm.iter_records(since="2000-01-01T00:00:00Z", until="2000-01-02T00:00:00Z")) == [
        ([], None)
    ]


def test_a_rate_limit_is_retryable_after_retry_after(crm: DataverseCrm, control) -> None:
    fault(control, "create_record", "http_429", seconds=7)
    with pytest.raises(DestinationError) as limited:
        crm.create_record(external_ref="opk_1", fields=FIELDS)
    assert limited.value.classification == Classification.RETRYABLE
    assert limited.value.rate_limit == RateLimit.WINDOW
    assert limited.value.retry_after == 7
    assert "exceeded the limit" in limited.value.message
    assert stats(control)["records"] == 0


def test_the_service_protection_window_spent_is_a_window_until_room_comes_back(
    crm: DataverseCrm, control
) -> None:
    """The emulator's own sliding window, made small (3 requests in 300 seconds):
    the fourth request is refused with the seconds until the first ages out."""
    configure(control, requests_per_window=3)
    crm.create_record(external_ref="opk_1", fields=FIELDS)
    crm.find_record(external_ref="opk_1")
    crm.find_task(record_id=record_guid("lead", "opk_1"), external_ref="opk_1-task")
    with pytest.raises(DestinationError) as limited:
        crm.create_record(external_ref="opk_2", fields=FIELDS)
    error = limited.value
    assert (error.classification, error.rate_limit) == (Classification.RETRYABLE, RateLimit.WINDOW)
    assert error.retry_after is not None and 290 <= error.retry_after <= 300
    assert "Number of requests exceeded the limit of 3 over time window of 300 seconds" in (
        error.message
    )
    assert stats(control)["records_by_external_ref"] == {"opk_1": 1}


def test_it_declares_the_documented_request_limit(crm: DataverseCrm) -> None:
    budget = crm.request_budget
    assert budget is not None
    assert (budget.requests, budget.per_seconds, budget.daily) == (6000, 300, None)
    assert budget.source.endswith("/data-platform/api-limits")


def test_find_record_and_find_task_read_what_a_lost_answer_committed(
    crm: DataverseCrm, control
) -> None:
    """What the engine relies on before creating again: retrieves by key, so a row
    whose create answer was lost is found at once and a 404 proves absence."""
    caps = crm.capabilities
    assert (caps.lookup, caps.lookup_proves_absence, caps.lookup_settle_seconds) == (
        True,
        True,
        0,
    )
    fault(control, "create_record", "drop_response_after_commit")
    with pytest.raises(DestinationError):
        crm.create_record(external_ref="opk_lost", fields=FIELDS)
    lead = crm.find_record(external_ref="opk_lost")
    assert lead == record_guid("lead", "opk_lost")
    fault(control, "create_task", "drop_response_after_commit")
    with pytest.raises(DestinationError):
        crm.create_task(record_id=lead, external_ref="opk_lost-t", title="Call", assignee="")
    assert crm.find_task(record_id=lead, external_ref="opk_lost-t") == record_guid(
        "task", "opk_lost-t"
    )
    fault(control, "create_record", "fail_before_commit")
    with pytest.raises(DestinationError):
        crm.create_record(external_ref="opk_never", fields=FIELDS)
    assert crm.find_record(external_ref="opk_never") is None
    assert crm.find_task(record_id=lead, external_ref="opk_never-t") is None


def test_a_long_message_is_cut_to_the_description_s_max_length(crm: DataverseCrm, control) -> None:
    guid = crm.create_record(external_ref="opk_long", fields={**FIELDS, "message": "x" * 5000}).ref
    record = crm.get_record(guid)
    assert record is not None and len(record["message"]) == 2000


def test_an_unknown_client_id_is_permanent(emulator, control) -> None:
    crm = adapter_from_env(
        base_url=None, timeout=5, env=env_for(emulator, DATAVERSE_CLIENT_ID="someone-else")
    )
    with pytest.raises(DestinationError) as refused:
        crm.find_record(external_ref="opk_1")
    assert refused.value.classification == Classification.PERMANENT
    assert refused.value.reply is not None and refused.value.reply.code == 400


def test_a_revoked_token_is_replaced_once_and_the_call_succeeds(crm: DataverseCrm, control) -> None:
    crm.create_record(external_ref="opk_1", fields=FIELDS)
    tokens_before = stats(control)["calls"]["token"]
    configure(control, revoke_tokens=True)
    assert crm.find_record(external_ref="opk_1") == record_guid("lead", "opk_1")
    assert stats(control)["calls"]["token"] == tokens_before + 1


def test_the_adapters_of_one_process_share_one_token(emulator, control) -> None:
    """The engine builds an adapter for each attempt: ten attempts ask Entra ID once."""
    for n in range(10):
        crm = adapter_from_env(base_url=None, timeout=5, env=env_for(emulator))
        assert crm.find_record(external_ref=f"opk_shared_{n}") is None
    calls = stats(control)["calls"]
    # Each absent lead is read twice: by its GUID, then by the alternate key.
    assert (calls["token"], calls["lookup_record"]) == (1, 20)
    assert "unauthorized" not in calls


def test_a_wrong_secret_is_permanent_and_never_quoted(emulator, control) -> None:
    crm = adapter_from_env(
        base_url=None, timeout=5, env=env_for(emulator, DATAVERSE_CLIENT_SECRET="not-the-secret")
    )
    with pytest.raises(DestinationError) as refused:
        crm.create_record(external_ref="opk_1", fields=FIELDS)
    assert refused.value.classification == Classification.PERMANENT
    assert "not-the-secret" not in str(refused.value)
    assert "not-the-secret" not in repr(crm) and SECRET not in repr(crm.credentials)
    assert stats(control)["records"] == 0


def test_verify_holds_for_an_active_alternate_key(crm: DataverseCrm, control) -> None:
    checks = {check.capability: check for check in crm.verify()}
    assert set(checks) == {"unique_external_ref", "lookup", "merge"}
    assert all(check.verified for check in checks.values())
    assert "onefold_ref_key on [onefold_ref]: Active" in checks["unique_external_ref"].how


@pytest.mark.parametrize("status", ["Pending", "InProgress", "Failed"])
def test_verify_refuses_an_alternate_key_that_is_not_active(
    crm: DataverseCrm, control, status: str
) -> None:
    configure(control, alternate_key_status=status)
    checks = {check.capability: check for check in crm.verify()}
    assert not checks["unique_external_ref"].verified
    assert not checks["lookup"].verified
    assert f"on [onefold_ref]: {status}" in checks["unique_external_ref"].how


def test_verify_refuses_a_key_on_another_column(emulator, control) -> None:
    crm = adapter_from_env(
        base_url=None, timeout=5, env=env_for(emulator, DATAVERSE_REF_COLUMN="new_ref")
    )
    checks = {check.capability: check for check in crm.verify()}
    assert not checks["unique_external_ref"].verified
    assert "no alternate key on [new_ref]" in checks["unique_external_ref"].how


def test_without_an_active_key_a_duplicate_reference_is_stored(crm: DataverseCrm, control) -> None:
    """Why verify() insists: an index still Pending enforces nothing."""
    configure(control, alternate_key_status="Pending")
    token = control_token(control)
    for _ in range(2):
        response = control.patch(
            f"{API_PATH}/leads({uuid.uuid4()})",
            json={"lastname": "X", "onefold_ref": "opk_dup"},
            headers={"Authorization": f"Bearer {token}", "If-None-Match": "*"},
        )
        assert response.status_code == 204
    assert stats(control)["records_by_external_ref"] == {"opk_dup": 2}


def test_configuration_from_the_environment(emulator: DataverseEmulator) -> None:
    crm = adapter_from_env(base_url="http://override.invalid/", timeout=5, env=env_for(emulator))
    assert crm.org_url == "http://override.invalid"
    assert crm.credentials.scope == "http://override.invalid/.default"
    assert crm.capabilities.unique_external_ref and crm.capabilities.lookup
    assert not crm.capabilities.idempotency_keys
    no_task_ref = adapter_from_env(
        base_url=None, timeout=5, env=env_for(emulator, DATAVERSE_TASK_REF_COLUMN="")
    )
    assert no_task_ref.task_ref_column == ""
    with pytest.raises(DestinationError) as missing:
        adapter_from_env(base_url=None, timeout=5, env={"DATAVERSE_CLIENT_ID": "x"})
    assert missing.value.classification == Classification.PERMANENT
    assert "DATAVERSE_URL" in missing.value.message
    assert "DATAVERSE_CLIENT_SECRET" in missing.value.message
    with pytest.raises(DestinationError):
        adapter_from_env(
            base_url=None, timeout=5, env=env_for(emulator, DATAVERSE_REF_COLUMN="x')/../")
        )
