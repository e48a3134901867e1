"""The Salesforce adapter against the Salesforce emulator, over loopback HTTP.

Each Salesforce answer the adapter can meet is produced by the emulator (its org
settings, seeded rows and the sandbox's fault queue), and the test asserts how
the adapter classifies it and what the org holds afterwards.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from integrations.base import Classification, DestinationError, RateLimit
from integrations.salesforce.adapter import (
    SalesforceCrm,
    SalesforceDuplicatesDetected,
    SalesforceMultipleMatches,
    adapter_from_env,
)
from lab.emulators.salesforce import SalesforceEmulator

CREDENTIALS = {
    "SALESFORCE_CLIENT_ID": "onefold-emulator",
    "SALESFORCE_CLIENT_SECRET": "emulator-secret",
}
ADA = {"name": "Ada Lovelace", "email": "ada@example.com", "message": "Kitchen refit, please."}


class Org:
    """The emulator's controls, as a test uses them."""

    def __init__(self, emulator: SalesforceEmulator) -> None:
        self.url = emulator.http_url
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def config(self, **settings: Any) -> None:
        self.client.post("/_sandbox/config", json=settings).raise_for_status()

    def fault(self, action: str, mode: str, times: int = 1) -> None:
        body = {"action": action, "mode": mode, "times": times}
        self.client.post("/_sandbox/faults", json=body).raise_for_status()

    def seed(self, sobject: str, *records: dict[str, Any]) -> list[str]:
        response = self.client.post(
            "/_sandbox/seed", json={"sobject": sobject, "records": list(records)}
        )
        response.raise_for_status()
        return list(response.json()["created"])

    def stats(self) -> dict[str, Any]:
        response = self.client.get("/_sandbox/stats")
        response.raise_for_status()
        return dict(response.json())

    def adapter(self, **env: str) -> SalesforceCrm:
        return adapter_from_env(base_url=self.url, timeout=5, env={**CREDENTIALS, **env})


@pytest.fixture(scope="module")
def emulator() -> Iterator[SalesforceEmulator]:
    running = SalesforceEmulator()
    with running:
        yield running


@pytest.fixture
def org(emulator: SalesforceEmulator) -> Iterator[Org]:
    controls = Org(emulator)
    controls.client.post("/_sandbox/reset").raise_for_status()
    yield controls
    controls.client.close()


def lead(ref: str, email: str = "someone@example.com") -> dict[str, Any]:
    return {"LastName": "Seeded", "Company": "Acme", "Email": email, "Onefold_Ref__c": ref}


# -- create once -----------------------------------------------------------------------


def test_a_lead_is_created_once_and_a_repeat_adopts_it_without_reassigning(org: Org) -> None:
    crm = org.adapter()
    first = crm.create_record(external_ref="op-1", fields=ADA)
    again = crm.create_record(external_ref="op-1", fields=ADA)

    assert (first.adopted, first.reply and first.reply.code) == (False, 201)
    assert first.ref.startswith("00Q") and len(first.ref) == 18
    assert (again.ref, again.adopted) == (first.ref, True)
    stats = org.stats()
    assert stats["records_by_external_ref"] == {"op-1": 1}
    # The assignment rule ran on the creation only; the repeat wrote nothing.
    assert stats["assignments_by_external_ref"] == {"op-1": 1}
    assert stats["calls"]["create_record"] == 1
    record = crm.get_record(first.ref)
    assert record is not None
    assert (record["external_ref"], record["name"], record["email"]) == (
        "op-1",
        "Ada Lovelace",
        "ada@example.com",
    )


def test_a_lost_upsert_answer_retried_gives_one_lead_and_one_task(org: Org) -> None:
    crm = org.adapter()
    org.fault("create_record", "drop_response_after_commit")
    with pytest.raises(DestinationError) as lost:
        crm.create_record(external_ref="op-2", fields=ADA)
    assert lost.value.classification == Classification.AMBIGUOUS
    record = crm.create_record(external_ref="op-2", fields=ADA)
    assert record.adopted

    org.fault("create_task", "drop_response_after_commit")
    with pytest.raises(DestinationError) as lost_task:
        crm.create_task(record_id=record.ref, external_ref="op-2-task", title="Call", assignee="x")
    assert lost_task.value.classification == Classification.AMBIGUOUS
    task = crm.create_task(
        record_id=record.ref, external_ref="op-2-task", title="Call", assignee="x"
    )
    assert task.adopted and task.ref.startswith("00T")
    assert crm.find_task(record_id=record.ref, external_ref="op-2-task") == task.ref

    stats = org.stats()
    assert (stats["records"], stats["tasks"]) == (1, 1)
    assert stats["assignments_by_external_ref"] == {"op-2": 1}


def test_a_500_after_commit_is_ambiguous_and_the_retry_adopts(org: Org) -> None:
    crm = org.adapter()
    org.fault("create_record", "http_500_after_commit")
    with pytest.raises(DestinationError) as unclear:
        crm.create_record(external_ref="op-3", fields=ADA)
    assert (unclear.value.classification, unclear.value.reply.code) == (  # type: ignore[union-attr]
        Classification.AMBIGUOUS,
        500,
    )
    assert crm.create_record(external_ref="op-3", fields=ADA).adopted
    assert org.stats()["records"] == 1


def test_contact_by_configuration(org: Org) -> None:
    crm = org.adapter(SALESFORCE_OBJECT="Contact")
    effect = crm.create_record(external_ref="op-4", fields=ADA)
    assert effect.ref.startswith("003")
    assert crm.find_record(external_ref="op-4") == effect.ref
    assert crm.reference_check(effect.ref) is None
    assert crm.reference_check("00Q5g000000XQquEAG") is not None
    # Contacts have no assignment rules.
    assert org.stats()["assignments_by_external_ref"] == {}


def test_concurrent_creates_on_a_unique_field_make_one_lead(org: Org) -> None:
    """The race between the lookup and the insert: the loser's insert is refused with
    DUPLICATE_VALUE, and it reads the winner back by the reference and adopts it."""
    org.config(upsert_race_seconds=0.3)
    crm = org.adapter()
    effects = _race(lambda: crm.create_record(external_ref="op-5", fields=ADA))
    assert not any(isinstance(e, Exception) for e in effects), effects
    assert len({e.ref for e in effects}) == 1
    assert sorted(e.adopted for e in effects) == [False, True]
    assert org.stats()["records_by_external_ref"] == {"op-5": 1}


def test_without_unique_the_same_race_makes_two_leads_and_then_300(org: Org) -> None:
    """Why verify() insists on Unique (restforce#243): without it, two racing upserts
    both insert, and every later upsert of the value answers 300."""
    org.config(upsert_race_seconds=0.3, reference_unique=False)
    crm = org.adapter()
    effects = _race(lambda: crm.create_record(external_ref="op-6", fields=ADA))
    assert [e.adopted for e in effects] == [False, False]
    with pytest.raises(SalesforceMultipleMatches):
        crm.create_record(external_ref="op-6", fields=ADA)
    assert org.stats()["records_by_external_ref"] == {"op-6": 2}


def _race(call: Any) -> list[Any]:
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = call()
        except DestinationError as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


# -- answers that become cases ------------------------------------------------------


def test_a_reference_held_by_several_records_is_permanent_and_names_them(org: Org) -> None:
    org.config(reference_unique=False)
    ids = org.seed("Lead", lead("op-7"), lead("op-7"))
    crm = org.adapter()
    with pytest.raises(SalesforceMultipleMatches) as several:
        crm.create_record(external_ref="op-7", fields=ADA)
    error = several.value
    assert (error.classification, error.reply.code) == (Classification.PERMANENT, 300)  # type: ignore[union-attr]
    assert error.record_ids == ids
    assert all(record_id in error.message[:200] for record_id in ids)
    with pytest.raises(SalesforceMultipleMatches):
        crm.find_record(external_ref="op-7")
    assert org.stats()["records"] == 2


def test_a_blocking_duplicate_rule_is_a_suspected_duplicate_naming_the_match(org: Org) -> None:
    org.config(duplicate_rule="block")
    [existing] = org.seed("Lead", lead("someone-else", email="ADA@example.com"))
    crm = org.adapter()
    with pytest.raises(SalesforceDuplicatesDetected) as suspected:
        crm.create_record(external_ref="op-8", fields=ADA)
    error = suspected.value
    assert error.classification == Classification.PERMANENT
    assert (error.record_ids, error.allow_save) == ([existing], False)
    assert existing in error.message[:200]
    # allowSave bypasses alerts only: a blocking rule refuses it still.
    with pytest.raises(SalesforceDuplicatesDetected):
        crm.create_record_allowing_duplicates(external_ref="op-8", fields=ADA)
    assert org.stats()["records"] == 1


def test_an_alerting_duplicate_rule_lets_a_reviewer_create_with_allow_save(org: Org) -> None:
    org.config(duplicate_rule="alert")
    [existing] = org.seed("Lead", lead("someone-else", email="ada@example.com"))
    crm = org.adapter()
    with pytest.raises(SalesforceDuplicatesDetected) as suspected:
        crm.create_record(external_ref="op-9", fields=ADA)
    assert suspected.value.allow_save is True
    assert "allowSave" in suspected.value.message
    created = crm.create_record_allowing_duplicates(external_ref="op-9", fields=ADA)
    assert created.ref != existing and not created.adopted
    assert org.stats()["records"] == 2


def test_the_request_limit_is_a_daily_limit_asked_again_in_an_hour(org: Org) -> None:
    crm = org.adapter()
    org.fault("create_record", "http_429")
    with pytest.raises(DestinationError) as limited:
        crm.create_record(external_ref="op-10", fields=ADA)
    error = limited.value
    assert (error.classification, error.reply.code) == (Classification.RETRYABLE, 403)  # type: ignore[union-attr]
    assert error.rate_limit == RateLimit.DAILY
    assert "REQUEST_LIMIT_EXCEEDED" in error.message
    assert error.retry_after == 3600
    # One setting changes the wait.
    org.fault("create_record", "http_429")
    with pytest.raises(DestinationError) as shorter:
        org.adapter(SALESFORCE_LIMIT_RETRY_SECONDS="900").create_record(
            external_ref="op-10", fields=ADA
        )
    assert shorter.value.retry_after == 900
    assert org.stats()["records"] == 0


def test_the_org_s_24_hours_spent_is_daily_and_nothing_is_created(org: Org) -> None:
    """The allocation really spent (not a fault): the token request is not counted,
    the describe-free create reads by reference, then the upsert is refused."""
    org.config(api_usage_limit=2)
    crm = org.adapter()
    crm.create_record(external_ref="op-10a", fields=ADA)  # GET by reference + PATCH
    with pytest.raises(DestinationError) as limited:
        crm.create_record(external_ref="op-10b", fields=ADA)
    error = limited.value
    assert error.rate_limit == RateLimit.DAILY
    assert (error.classification, error.retry_after) == (Classification.RETRYABLE, 3600)
    assert "api-usage=2/2" in error.message
    assert org.stats()["records_by_external_ref"] == {"op-10a": 1}


def test_the_concurrent_long_request_limit_is_a_short_window() -> None:
    """The same 403 for the limit on concurrent requests of 20 seconds or longer
    ([LIMITS]): it clears as they end. The answer alone is classified (pure logic)."""
    crm = adapter_from_env(base_url="https://acme.my.salesforce.com", timeout=5, env=CREDENTIALS)
    request = httpx.Request(
        "POST", "https://acme.my.salesforce.com/services/data/v62.0/sobjects/Lead"
    )
    body = [
        {
            "message": "ConcurrentPerOrgLongTxn Limit exceeded.",
            "errorCode": "REQUEST_LIMIT_EXCEEDED",
        }
    ]
    answer = httpx.Response(
        403, json=body, headers={"Sforce-Limit-Info": "api-usage=120/15000"}, request=request
    )
    error = crm._error(answer)
    assert error.rate_limit == RateLimit.WINDOW
    assert (error.classification, error.retry_after) == (Classification.RETRYABLE, 20)


def test_find_record_reads_a_lead_committed_a_moment_ago_and_proves_absence(org: Org) -> None:
    """What the engine relies on before creating again: a read by the external id, not
    a search, so a lead whose create answer was lost is found at once, and a create
    refused before commit is absent."""
    crm = org.adapter()
    assert (crm.capabilities.lookup, crm.capabilities.lookup_proves_absence) == (True, True)
    assert crm.capabilities.lookup_settle_seconds == 0
    org.fault("create_record", "drop_response_after_commit")
    with pytest.raises(DestinationError):
        crm.create_record(external_ref="op-10c", fields=ADA)
    found = crm.find_record(external_ref="op-10c")
    assert found is not None and found.startswith("00Q")
    org.fault("create_record", "fail_before_commit")
    with pytest.raises(DestinationError):
        crm.create_record(external_ref="op-10d", fields=ADA)
    assert crm.find_record(external_ref="op-10d") is None
    org.fault("create_task", "drop_response_after_commit")
    with pytest.raises(DestinationError):
        crm.create_task(record_id=found, external_ref="op-10c-task", title="Call", assignee="")
    task = crm.find_task(record_id=found, external_ref="op-10c-task")
    assert task is not None and task.startswith("00T")
    assert crm.find_task(record_id=found, external_ref="op-10d-task") is None


def test_a_long_name_is_cut_to_the_field_and_a_bad_email_refused(org: Org) -> None:
    crm = org.adapter()
    long_name = {**ADA, "name": "Ada " + "L" * 120, "company": "C" * 300}
    record = crm.create_record(external_ref="op-10e", fields=long_name)
    row = org.client.get("/_sandbox/stats").json()
    assert row["records_by_external_ref"] == {"op-10e": 1}
    stored = crm.get_record(record.ref)
    assert stored is not None and len(stored["name"]) == len("Ada ") + 80
    with pytest.raises(DestinationError) as refused:
        crm.create_record(external_ref="op-10f", fields={**ADA, "email": "ada(at)example"})
    assert refused.value.classification == Classification.PERMANENT
    assert "INVALID_EMAIL_ADDRESS" in refused.value.message


@pytest.mark.parametrize(
    ("mode", "classification", "status"),
    [
        ("fail_before_commit", Classification.AMBIGUOUS, 500),
        ("http_503", Classification.RETRYABLE, 503),
        ("http_400", Classification.PERMANENT, 400),
    ],
)
def test_other_refusals_are_classified(
    org: Org, mode: str, classification: Classification, status: int
) -> None:
    crm = org.adapter()
    org.fault("create_task", mode)
    record = crm.create_record(external_ref="op-11", fields=ADA)
    with pytest.raises(DestinationError) as refused:
        crm.create_task(record_id=record.ref, external_ref="op-11-task", title="t", assignee="")
    assert (refused.value.classification, refused.value.reply.code) == (  # type: ignore[union-attr]
        classification,
        status,
    )
    assert org.stats()["tasks"] == 0


def test_a_task_for_an_unknown_record_is_refused(org: Org) -> None:
    crm = org.adapter()
    with pytest.raises(DestinationError) as refused:
        crm.create_task(
            record_id="00Q5g000000XQquEAG", external_ref="op-12", title="t", assignee=""
        )
    assert refused.value.classification == Classification.PERMANENT
    assert "INVALID_CROSS_REFERENCE_KEY" in refused.value.message


# -- tokens -----------------------------------------------------------------------------


def test_the_token_is_fetched_once_and_again_after_a_401(org: Org) -> None:
    crm = org.adapter()
    crm.create_record(external_ref="op-13", fields=ADA)
    crm.find_record(external_ref="op-13")
    assert org.stats()["calls"]["token"] == 1
    org.client.post("/_sandbox/expire_tokens").raise_for_status()
    assert crm.find_record(external_ref="op-13") is not None
    assert org.stats()["calls"]["token"] == 2
    # The engine builds an adapter for each attempt: they share the process's token.
    assert org.adapter().find_record(external_ref="op-13") is not None
    assert org.stats()["calls"]["token"] == 2


def test_an_unknown_client_id_is_permanent(org: Org) -> None:
    crm = org.adapter(SALESFORCE_CLIENT_ID="someone-else")
    with pytest.raises(DestinationError) as refused:
        crm.find_record(external_ref="op-14a")
    assert refused.value.classification == Classification.PERMANENT
    assert refused.value.reply is not None and refused.value.reply.code == 400
    assert org.stats()["calls"]["token"] == 1


def test_wrong_credentials_are_permanent_and_never_shown(org: Org) -> None:
    crm = org.adapter(SALESFORCE_CLIENT_SECRET="s3cret-not-this-one")
    with pytest.raises(DestinationError) as refused:
        crm.create_record(external_ref="op-14", fields=ADA)
    assert refused.value.classification == Classification.PERMANENT
    assert "s3cret" not in refused.value.message
    assert "s3cret" not in repr(crm.config) and "s3cret" not in repr(crm.credentials)


def test_a_configuration_it_cannot_use_refuses_every_call_naming_the_variables() -> None:
    crm = adapter_from_env(
        base_url=None, timeout=5, env={"SALESFORCE_OBJECT": "Account", "SALESFORCE_CLIENT_ID": "x"}
    )
    for call in (lambda: crm.find_record(external_ref="x"), crm.verify):
        with pytest.raises(DestinationError) as refused:
            call()
        # Nothing was sent: retryable once the configuration is corrected.
        assert refused.value.classification == Classification.RETRYABLE
        message = refused.value.message
        assert "SALESFORCE_INSTANCE_URL is not set" in message
        assert "SALESFORCE_CLIENT_SECRET is not set" in message
        assert "SALESFORCE_OBJECT must be Lead or Contact" in message


# -- verification -------------------------------------------------------------------------


def test_verify_holds_when_the_field_is_external_id_and_unique(org: Org) -> None:
    checks = {c.capability: c for c in org.adapter().verify()}
    assert set(checks) == {"unique_external_ref", "lookup"}
    assert all(c.verified for c in checks.values())
    assert "Lead/describe: Onefold_Ref__c externalId=true unique=true" in checks["lookup"].how


@pytest.mark.parametrize(
    ("settings", "refused", "named"),
    [
        (
            {"reference_unique": False},
            {"unique_external_ref"},
            "Lead/describe: Onefold_Ref__c externalId=true unique=false",
        ),
        (
            {"task_reference_unique": False},
            {"unique_external_ref"},
            "Task/describe: Onefold_Ref__c externalId=true unique=false",
        ),
        (
            {"reference_external_id": False},
            {"unique_external_ref", "lookup"},
            "Lead/describe: Onefold_Ref__c externalId=false",
        ),
    ],
)
def test_verify_refuses_a_field_the_org_does_not_enforce(
    org: Org, settings: dict[str, bool], refused: set[str], named: str
) -> None:
    org.config(**settings)
    checks = org.adapter().verify()
    assert {c.capability for c in checks if not c.verified} == refused
    for check in checks:
        if not check.verified:
            assert named in check.how
            assert "Object Manager" in check.how


def test_verify_refuses_a_field_the_object_lacks(org: Org) -> None:
    checks = org.adapter(SALESFORCE_REFERENCE_FIELD="Other_Ref__c").verify()
    assert not any(c.verified for c in checks)
    assert all("no field Other_Ref__c" in c.how for c in checks)


# -- references, updates, listing, merge ----------------------------------------------------


def test_reference_check_knows_salesforce_ids(org: Org) -> None:
    crm = org.adapter()
    created = crm.create_record(external_ref="op-15", fields=ADA).ref
    assert crm.reference_check(created) is None
    assert crm.reference_check(created[:15]) is None
    assert crm.get_record(created[:15]) is not None
    broken = created[:15] + ("AAA" if created[15:] != "AAA" else "BBB")
    assert "do not match" in (crm.reference_check(broken) or "")
    for wrong in (
        "0035g000000XQquEAG",
        "00Q5g000000XQquE",
        "00Q5g000000-Qqu",
        "../../_sandbox/stats",
        "rec_000001",
    ):
        assert crm.reference_check(wrong) is not None, wrong


def test_an_update_keeps_the_owner(org: Org) -> None:
    crm = org.adapter()
    created = crm.create_record(external_ref="op-16", fields=ADA).ref
    effect = crm.update_record(record_id=created, fields={**ADA, "name": "Ada King"})
    assert (effect.ref, effect.reply and effect.reply.code) == (created, 204)
    record = crm.get_record(created)
    assert record is not None and record["name"] == "Ada King"
    assert org.stats()["assignments_by_external_ref"] == {"op-16": 1}


def test_iter_records_pages_through_the_query_and_resumes_from_a_cursor(org: Org) -> None:
    org.client.post(
        "/_sandbox/seed", json={"sobject": "Lead", "count": 450, "prefix": "bulk-"}
    ).raise_for_status()
    crm = org.adapter()
    pages = list(crm.iter_records(since="2000-01-01T00:00:00Z", limit=200))
    assert [len(page) for page, _ in pages] == [200, 200, 50]
    assert pages[-1][1] is None and all(cursor for _, cursor in pages[:-1])
    refs = [r["external_ref"] for page, _ in pages for r in page]
    assert sorted(refs) == sorted(f"bulk-{i}" for i in range(450))
    first = pages[0][0][0]
    assert set(first) == {"id", "external_ref", "created_at", "updated_at"}
    assert first["created_at"].endswith("Z") and first["id"].startswith("00Q")
    resumed = list(crm.iter_records(since="2000-01-01T00:00:00Z", cursor=pages[0][1], limit=200))
    assert [len(page) for page, _ in resumed] == [200, 50]
    assert list(crm.iter_records(since="2000-01-01T00:00:00Z", until="2000-01-02T00:00:00Z")) == [
        ([], None)
    ]


def test_merge_is_not_offered(org: Org) -> None:
    crm = org.adapter()
    assert crm.capabilities.merge is False
    assert (crm.capabilities.unique_external_ref, crm.capabilities.lookup) == (True, True)
    assert crm.capabilities.idempotency_keys is False
    with pytest.raises(DestinationError) as refused:
        crm.merge_records(survivor_id="a", duplicate_id="b", key="k")
    assert refused.value.classification == Classification.PERMANENT
