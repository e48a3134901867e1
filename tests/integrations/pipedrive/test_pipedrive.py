"""The Pipedrive adapter against the Pipedrive emulator over real HTTP on loopback.

One emulator per module (port 0), reset before each test, its search lag set
per test. What is counted is what the emulator holds: leads (records),
activities (tasks) and persons, by Onefold's reference.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from integrations.base import Classification, CrmAdapter, DestinationError, RateLimit
from integrations.pipedrive.adapter import DEFAULT_SETTLE_SECONDS, PipedriveCrm, adapter_from_env
from integrations.times import seconds_to_midnight
from lab.emulators.pipedrive import (
    DEFAULT_API_TOKEN,
    MESSAGE_FIELD_KEY,
    REFERENCE_FIELD_KEY,
    PipedriveEmulator,
)

LAG = 0.4  # seconds the emulator's search trails its writes, in these tests


@pytest.fixture(scope="module")
def emulator() -> Iterator[PipedriveEmulator]:
    with PipedriveEmulator() as server:
        yield server


@pytest.fixture
def control(emulator: PipedriveEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emulator.http_url, timeout=30) as http:
        assert http.post("/_sandbox/reset").status_code == 200
        configure(http, search_lag_seconds=LAG)
        yield http


@pytest.fixture
def crm(emulator: PipedriveEmulator, control: httpx.Client) -> PipedriveCrm:
    env = {**emulator.adapter_env(), "PIPEDRIVE_SETTLE_SECONDS": str(LAG * 2)}
    return adapter_from_env(base_url=None, timeout=5, env=env)


def configure(control: httpx.Client, **settings: Any) -> None:
    response = control.post("/_sandbox/config", json=settings)
    assert response.status_code == 200, response.text


def fault(control: httpx.Client, action: str, mode: str, **options: Any) -> None:
    body = {"action": action, "mode": mode, **options}
    assert control.post("/_sandbox/faults", json=body).status_code == 200


def stats(control: httpx.Client) -> dict[str, Any]:
    return control.get("/_sandbox/stats").json()


def vendor(control: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    response = control.request(method, path, headers={"x-api-token": DEFAULT_API_TOKEN}, **kwargs)
    assert response.status_code < 300, response.text
    return response.json()["data"]


def enquiry(email: str = "ada@example.com", name: str = "Ada Lovelace") -> dict[str, Any]:
    return {"name": name, "email": email, "phone": "", "message": "Hi", "form": "contact"}


def settle() -> None:
    time.sleep(LAG + 0.2)


def raised(call: Any) -> DestinationError:
    with pytest.raises(DestinationError) as caught:
        call()
    return caught.value


# -- capabilities and verification ----------------------------------------------


def test_it_claims_no_uniqueness_no_key_and_a_lookup_that_proves_no_absence(
    crm: PipedriveCrm,
) -> None:
    assert isinstance(crm, CrmAdapter)
    caps = crm.capabilities
    assert (caps.idempotency_keys, caps.unique_external_ref, caps.merge) == (False, False, False)
    assert caps.lookup is True
    assert caps.lookup_proves_absence is False
    assert caps.lookup_settle_seconds == LAG * 2


def test_verify_holds_when_the_reference_field_exists_and_is_searchable(
    crm: PipedriveCrm,
) -> None:
    lookup, message = crm.verify()
    assert (lookup.capability, lookup.verified) == ("lookup", True)
    assert REFERENCE_FIELD_KEY in lookup.how and "GET /v1/leadFields" in lookup.how
    assert (message.capability, message.verified) == ("message_field", True)
    assert MESSAGE_FIELD_KEY in message.how


def test_verify_refuses_a_missing_reference_field(crm: PipedriveCrm, control: httpx.Client) -> None:
    configure(control, lead_fields=[])
    lookup, message = crm.verify()
    assert (lookup.capability, lookup.verified) == ("lookup", False)
    assert f"{REFERENCE_FIELD_KEY} is not a lead field" in lookup.how
    assert (message.capability, message.verified) == ("message_field", False)


def test_verify_refuses_a_reference_field_search_cannot_find(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    field = {"key": REFERENCE_FIELD_KEY, "name": "Onefold reference", "field_type": "enum"}
    configure(control, lead_fields=[field])
    check = crm.verify()[0]
    assert check.verified is False
    assert "type enum, which search cannot find" in check.how


def test_verify_refuses_a_message_field_that_holds_no_text(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    fields = [
        {"key": REFERENCE_FIELD_KEY, "name": "Onefold reference", "field_type": "varchar"},
        {"key": MESSAGE_FIELD_KEY, "name": "Onefold message", "field_type": "date"},
    ]
    configure(control, lead_fields=fields)
    lookup, message = crm.verify()
    assert lookup.verified is True
    assert (message.verified, message.how.endswith("is of type date")) == (False, True)


def test_without_a_message_field_the_message_is_not_sent(
    emulator: PipedriveEmulator, control: httpx.Client
) -> None:
    env = {**emulator.adapter_env(), "PIPEDRIVE_MESSAGE_FIELD": ""}
    adapter = adapter_from_env(base_url=None, timeout=5, env=env)
    assert [check.capability for check in adapter.verify()] == ["lookup"]
    lead = adapter.create_record(external_ref="op-nomsg", fields=enquiry())
    assert MESSAGE_FIELD_KEY not in vendor(control, "GET", f"/v1/leads/{lead.ref}")


def test_a_field_missing_from_pipedrive_loses_the_reference_silently(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    """Why verify() matters: the lead is created, the reference is not kept, so no
    lookup can ever find it."""
    configure(control, lead_fields=[])
    lead = crm.create_record(external_ref="op-lost", fields=enquiry()).ref
    settle()
    assert crm.find_record(external_ref="op-lost") is None
    assert vendor(control, "GET", f"/v1/leads/{lead}").get(REFERENCE_FIELD_KEY) is None


# -- configuration ----------------------------------------------------------------


def test_adapter_from_env_names_a_missing_variable_and_never_the_token(
    emulator: PipedriveEmulator,
) -> None:
    env = emulator.adapter_env()
    missing = raised(
        lambda: adapter_from_env(base_url=None, timeout=5, env={**env, "PIPEDRIVE_API_TOKEN": ""})
    )
    assert "PIPEDRIVE_API_TOKEN" in missing.message
    bad_field = raised(
        lambda: adapter_from_env(
            base_url=None, timeout=5, env={**env, "PIPEDRIVE_REFERENCE_FIELD": "onefold_ref"}
        )
    )
    assert "PIPEDRIVE_REFERENCE_FIELD" in bad_field.message
    bad_settle = raised(
        lambda: adapter_from_env(
            base_url=None, timeout=5, env={**env, "PIPEDRIVE_SETTLE_SECONDS": "soon"}
        )
    )
    assert "PIPEDRIVE_SETTLE_SECONDS" in bad_settle.message
    for error in (missing, bad_field, bad_settle):
        assert error.classification == Classification.RETRYABLE
        assert DEFAULT_API_TOKEN not in error.message


def test_adapter_from_env_defaults_and_the_destinations_url_first(
    emulator: PipedriveEmulator,
) -> None:
    env = {k: v for k, v in emulator.adapter_env().items() if k != "PIPEDRIVE_BASE_URL"}
    adapter = adapter_from_env(base_url=None, timeout=5, env=env)
    assert adapter.base_url == "https://api.pipedrive.com"
    assert adapter.capabilities.lookup_settle_seconds == DEFAULT_SETTLE_SECONDS
    chosen = adapter_from_env(base_url="http://127.0.0.1:1/", timeout=5, env=emulator.adapter_env())
    assert chosen.base_url == "http://127.0.0.1:1"
    assert DEFAULT_API_TOKEN not in repr(chosen)


def test_a_wrong_token_is_permanent_and_not_repeated_in_the_message(
    emulator: PipedriveEmulator, control: httpx.Client
) -> None:
    env = {**emulator.adapter_env(), "PIPEDRIVE_API_TOKEN": "wrong-token-1234"}
    adapter = adapter_from_env(base_url=None, timeout=5, env=env)
    error = raised(lambda: adapter.create_record(external_ref="op-1", fields=enquiry()))
    assert error.classification == Classification.PERMANENT
    assert str(error.reply) == "HTTP 401"
    assert "wrong-token-1234" not in error.message
    assert stats(control)["records"] == 0


# -- the enquiry ------------------------------------------------------------------


def test_the_enquiry_is_a_lead_of_the_person_found_by_email(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    first = crm.create_record(external_ref="op-1", fields=enquiry())
    settle()
    second = crm.create_record(external_ref="op-2", fields=enquiry(name="Ada L."))
    leads = [vendor(control, "GET", f"/v1/leads/{ref}") for ref in (first.ref, second.ref)]
    assert leads[0]["person_id"] == leads[1]["person_id"]  # the returning customer
    assert [lead[REFERENCE_FIELD_KEY] for lead in leads] == ["op-1", "op-2"]
    assert leads[0]["title"] == "Enquiry from Ada Lovelace (contact)"
    assert str(first.reply) == "HTTP 201" and first.adopted is False
    counted = stats(control)
    assert counted["records_by_external_ref"] == {"op-1": 1, "op-2": 1}
    assert counted["calls"]["create_person"] == 1


def test_find_record_trails_the_write_by_the_search_lag(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    lead = crm.create_record(external_ref="op-lag", fields=enquiry()).ref
    assert crm.find_record(external_ref="op-lag") is None  # not yet indexed: no proof
    settle()
    assert crm.find_record(external_ref="op-lag") == lead


def test_find_record_matches_the_reference_exactly(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    """Pipedrive's exact_match is not case sensitive; references are."""
    upper = crm.create_record(external_ref="OP-CASE", fields=enquiry()).ref
    lower = crm.create_record(external_ref="op-case", fields=enquiry()).ref
    settle()
    assert crm.find_record(external_ref="op-case") == lower
    assert crm.find_record(external_ref="OP-CASE") == upper


def test_two_leads_with_one_reference_is_permanent_and_names_both(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    """Pipedrive stores the duplicate without a word; the lookup refuses to choose."""
    refs = [crm.create_record(external_ref="op-dup", fields=enquiry()).ref for _ in range(2)]
    settle()
    error = raised(lambda: crm.find_record(external_ref="op-dup"))
    assert error.classification == Classification.PERMANENT
    assert all(ref in error.message for ref in refs)


def test_get_update_and_reference_check(crm: PipedriveCrm, control: httpx.Client) -> None:
    lead = crm.create_record(external_ref="op-get", fields=enquiry()).ref
    record = crm.get_record(lead)
    assert record is not None
    assert (record["id"], record["external_ref"], record["merged_into"]) == (lead, "op-get", None)
    assert (record["name"], record["email"]) == ("Ada Lovelace", "ada@example.com")
    assert record["message"] == "Hi"
    updated = crm.update_record(
        record_id=lead,
        fields={**enquiry(email="grace@example.com", name="Grace"), "message": "Hello"},
    )
    assert updated.ref == lead
    again = crm.get_record(lead)
    assert again is not None and again["email"] == "grace@example.com"
    assert again["title"] == "Enquiry from Grace (contact)"
    assert again["message"] == "Hello"
    assert crm.get_record("00000000-0000-4000-8000-000000000000") is None
    assert crm.reference_check(lead) is None
    assert crm.reference_check("../../_sandbox/stats") is not None
    assert crm.get_record("../../_sandbox/stats") is None


def test_merge_is_refused_permanently(crm: PipedriveCrm) -> None:
    error = raised(lambda: crm.merge_records(survivor_id="a", duplicate_id="b", key="k"))
    assert error.classification == Classification.PERMANENT


# -- the task ---------------------------------------------------------------------


def test_the_task_is_an_activity_of_the_lead_found_by_its_reference(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    lead = crm.create_record(external_ref="op-t", fields=enquiry()).ref
    other = crm.create_record(external_ref="op-u", fields=enquiry()).ref
    task = crm.create_task(record_id=lead, external_ref="op-t", title="Follow up", assignee="7")
    crm.create_task(record_id=other, external_ref="op-u", title="Follow up", assignee="sales")
    activity = vendor(control, "GET", f"/api/v2/activities/{task.ref}")
    assert (activity["lead_id"], activity["type"], activity["owner_id"]) == (lead, "task", 7)
    # The lead's activity list is no search: found at once.
    assert crm.find_task(record_id=lead, external_ref="op-t") == task.ref
    assert crm.find_task(record_id=lead, external_ref="op-u") is None
    assert stats(control)["tasks_by_external_ref"] == {"op-t": 1, "op-u": 1}


def test_a_task_for_a_missing_lead_is_permanent(crm: PipedriveCrm) -> None:
    error = raised(
        lambda: crm.create_task(
            record_id="00000000-0000-4000-8000-000000000000",
            external_ref="op-x",
            title="Follow up",
            assignee="sales",
        )
    )
    assert error.classification == Classification.PERMANENT


# -- classification -----------------------------------------------------------------


def test_a_lost_create_answer_is_ambiguous_and_found_only_after_the_lag(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    fault(control, "create_record", "drop_response_after_commit")
    error = raised(lambda: crm.create_record(external_ref="op-drop", fields=enquiry()))
    assert error.classification == Classification.AMBIGUOUS
    assert stats(control)["records_by_external_ref"] == {"op-drop": 1}
    assert crm.find_record(external_ref="op-drop") is None  # "not found" proves nothing
    time.sleep(crm.capabilities.lookup_settle_seconds)
    assert crm.find_record(external_ref="op-drop") is not None


def test_a_500_before_commit_is_ambiguous_though_nothing_was_stored(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    """From outside, a 500 cannot say whether the lead exists: only a lookup can,
    and with a lagging search even that cannot prove absence (hence a case)."""
    fault(control, "create_record", "fail_before_commit")
    error = raised(lambda: crm.create_record(external_ref="op-500", fields=enquiry()))
    assert error.classification == Classification.AMBIGUOUS
    assert str(error.reply) == "HTTP 500"
    assert stats(control)["records"] == 0


def test_429_is_retryable_after_the_reset_header(crm: PipedriveCrm, control: httpx.Client) -> None:
    fault(control, "create_record", "http_429", seconds=7)
    error = raised(lambda: crm.create_record(external_ref="op-429", fields=enquiry()))
    assert error.classification == Classification.RETRYABLE
    assert (error.retry_after, error.rate_limit) == (7.0, RateLimit.WINDOW)
    fault(control, "create_task", "http_429", seconds=3)
    lead = crm.create_record(external_ref="op-429", fields=enquiry()).ref
    task_error = raised(
        lambda: crm.create_task(record_id=lead, external_ref="op-429", title="t", assignee="s")
    )
    assert (task_error.classification, task_error.retry_after) == (Classification.RETRYABLE, 3.0)
    assert stats(control)["tasks"] == 0


def test_the_burst_limit_is_a_window_asked_again_after_its_reset(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    """The emulator's own burst window, made small so that one enquiry fills it: the
    person search counts in the search window, the person and the lead in this one."""
    configure(control, burst_limit=2)
    crm.create_record(external_ref="op-burst-1", fields=enquiry("one@example.com"))
    error = raised(
        lambda: crm.create_record(external_ref="op-burst-2", fields=enquiry("two@example.com"))
    )
    assert (error.classification, error.rate_limit) == (Classification.RETRYABLE, RateLimit.WINDOW)
    assert error.retry_after is not None and 0 < error.retry_after <= 2
    assert error.reply is not None and error.reply.code == 429
    time.sleep(error.retry_after)
    crm.create_record(external_ref="op-burst-2", fields=enquiry("two@example.com"))
    assert stats(control)["records_by_external_ref"] == {"op-burst-1": 1, "op-burst-2": 1}


def test_a_spent_token_budget_is_daily_until_the_server_s_midnight(
    emulator: PipedriveEmulator, control: httpx.Client
) -> None:
    """40 tokens: the first enquiry spends 35 (search 20, person 5, lead 10); the next
    search (20) is refused while the 2-second window has room: the day's budget."""
    configure(control, daily_token_budget=40)
    env = {**emulator.adapter_env(), "PIPEDRIVE_BUDGET_TIMEZONE": "Europe/Tallinn"}
    crm = adapter_from_env(base_url=None, timeout=5, env=env)
    crm.create_record(external_ref="op-budget-1", fields=enquiry())
    error = raised(lambda: crm.create_record(external_ref="op-budget-2", fields=enquiry()))
    assert (error.classification, error.rate_limit) == (Classification.RETRYABLE, RateLimit.DAILY)
    expected = seconds_to_midnight("Europe/Tallinn")
    assert error.retry_after is not None and abs(error.retry_after - expected) < 5
    assert "budget" in error.message
    assert stats(control)["records_by_external_ref"] == {"op-budget-1": 1}


def test_a_budget_time_zone_that_is_no_zone_refuses_the_configuration(
    emulator: PipedriveEmulator,
) -> None:
    env = {**emulator.adapter_env(), "PIPEDRIVE_BUDGET_TIMEZONE": "Mars/Olympus"}
    error = raised(lambda: adapter_from_env(base_url=None, timeout=5, env=env))
    assert error.classification == Classification.RETRYABLE
    assert "PIPEDRIVE_BUDGET_TIMEZONE" in error.message


def test_it_declares_the_lite_plan_s_burst_limit_as_its_budget() -> None:
    budget = PipedriveCrm.request_budget
    assert budget is not None
    assert (budget.requests, budget.per_seconds, budget.daily) == (20, 2, None)
    assert budget.source == "https://pipedrive.readme.io/docs/core-api-concepts-rate-limiting"


def test_400_is_permanent_and_a_lost_task_answer_ambiguous(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    fault(control, "create_record", "http_400")
    assert (
        raised(lambda: crm.create_record(external_ref="op-400", fields=enquiry())).classification
        == Classification.PERMANENT
    )
    lead = crm.create_record(external_ref="op-400", fields=enquiry()).ref
    fault(control, "create_task", "drop_response_after_commit")
    error = raised(
        lambda: crm.create_task(record_id=lead, external_ref="op-400", title="t", assignee="s")
    )
    assert error.classification == Classification.AMBIGUOUS
    assert crm.find_task(record_id=lead, external_ref="op-400") is not None


# -- listing for reconciliation -----------------------------------------------------


def test_iter_records_pages_by_add_time_within_the_window(
    crm: PipedriveCrm, control: httpx.Client
) -> None:
    # Lifted on purpose: this is about paging, and the 7 enquiries and their reads
    # take about 30 requests in a second, past Lite's 20 per 2 seconds.
    configure(control, rate_limits=False)
    refs = [f"op-list-{n}" for n in range(7)]
    leads = [crm.create_record(external_ref=ref, fields=enquiry()).ref for ref in refs]
    added = [vendor(control, "GET", f"/v1/leads/{lead}")["add_time"] for lead in leads]
    pages = list(crm.iter_records(since=added[1], until=added[6], limit=2))
    listed = [record["external_ref"] for page, _ in pages for record in page]
    assert listed == refs[1:6]
    assert all(
        set(r) >= {"id", "external_ref", "created_at", "updated_at"} for p, _ in pages for r in p
    )
    assert pages[-1][1] is None and all(cursor for _, cursor in pages[:-1])
    # Resuming from a cursor lists what follows it, once.
    resumed = list(crm.iter_records(since=added[1], until=added[6], cursor=pages[0][1], limit=2))
    assert [r["external_ref"] for page, _ in resumed for r in page] == listed[1:]
