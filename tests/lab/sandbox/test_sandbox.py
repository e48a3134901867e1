"""The sandbox destination over real HTTP and SMTP on loopback.

One `SandboxServer` per module (port 0), reset before each test. These tests
need no database: the sandbox keeps its own state.
"""

from __future__ import annotations

import os
import queue
import signal
import smtplib
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest

from lab.sandbox import SandboxServer
from tests.support.processes import REPO


@pytest.fixture(scope="module")
def server() -> Iterator[SandboxServer]:
    with SandboxServer(http_port=0, smtp_port=0) as sandbox:
        yield sandbox


@pytest.fixture
def client(server: SandboxServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.http_url, timeout=30) as http:
        assert http.post("/_sandbox/reset").status_code == 200
        yield http


def create(client: httpx.Client, ref: str | None, **fields: Any) -> httpx.Response:
    headers = {}
    if "key" in fields:
        headers["Idempotency-Key"] = fields.pop("key")
    body = {"external_ref": ref, "name": "Ada", "email": "ada@example.com", "message": "Hi"}
    return client.post("/crm/records", json={**body, **fields}, headers=headers)


def seed(client: httpx.Client, count: int, prefix: str, created_at: str) -> None:
    body = {"count": count, "prefix": prefix, "created_at": created_at}
    assert client.post("/_sandbox/seed", json=body).json() == {"created": count}


def stats(client: httpx.Client) -> dict[str, Any]:
    return client.get("/_sandbox/stats").json()


def capabilities(client: httpx.Client, **changes: Any) -> dict[str, Any]:
    response = client.post("/_sandbox/capabilities", json=changes)
    assert response.status_code == 200, response.text
    return response.json()


def fault(client: httpx.Client, action: str, mode: str, **options: Any) -> None:
    response = client.post("/_sandbox/faults", json={"action": action, "mode": mode, **options})
    assert response.status_code == 200, response.text


def email(
    to: str = "ada@example.com", message_id: str = "<m1@onefold.test>", subject: str = "Thanks"
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = "enquiries@onefold.invalid"
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = message_id
    message.set_content("We received your enquiry.\n")
    return message


def send(server: SandboxServer, message: EmailMessage) -> None:
    with smtplib.SMTP(server.host, server.smtp_port, timeout=10) as smtp:
        smtp.send_message(message)


# -- records --------------------------------------------------------------


def test_create_answers_201_with_the_full_record(client: httpx.Client) -> None:
    response = create(client, "op-1", phone="+44 20 7946 0000")

    assert response.status_code == 201
    record = response.json()
    assert record["id"] == "rec_000001"
    assert record["external_ref"] == "op-1"
    assert (record["name"], record["email"], record["message"]) == ("Ada", "ada@example.com", "Hi")
    assert record["extra"] == {"phone": "+44 20 7946 0000"}
    assert record["merged_into"] is None
    assert record["created_at"].endswith("Z") and len(record["created_at"]) == 27
    assert client.get(f"/crm/records/{record['id']}").json() == record


def test_a_second_record_with_the_same_external_ref_is_refused(client: httpx.Client) -> None:
    first = create(client, "op-1").json()

    response = create(client, "op-1")

    assert response.status_code == 409
    assert response.json() == {
        "detail": "external_ref already exists",
        "code": "duplicate_external_ref",
        "existing_id": first["id"],
    }
    assert stats(client)["records_by_external_ref"] == {"op-1": 1}


def test_duplicates_are_stored_when_uniqueness_is_off(client: httpx.Client) -> None:
    capabilities(client, unique_external_ref=False)

    assert create(client, "op-1").status_code == 201
    assert create(client, "op-1").status_code == 201

    assert stats(client)["records_by_external_ref"] == {"op-1": 2}
    assert len(client.get("/crm/records", params={"external_ref": "op-1"}).json()["results"]) == 2


def test_an_idempotency_key_replays_the_same_record(client: httpx.Client) -> None:
    capabilities(client, idempotency_keys=True, unique_external_ref=False)
    first = create(client, "op-1", key="k-1")

    again = create(client, "op-1", key="k-1", name="Changed")

    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert stats(client)["records"] == 1


def test_the_idempotency_key_is_ignored_when_the_capability_is_off(client: httpx.Client) -> None:
    capabilities(client, unique_external_ref=False)

    create(client, "op-1", key="k-1")
    again = create(client, "op-1", key="k-1")

    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again.headers
    assert stats(client)["records"] == 2


def test_an_expired_idempotency_key_is_forgotten(client: httpx.Client) -> None:
    capabilities(client, idempotency_keys=True, idempotency_key_ttl_seconds=0.2)
    first = create(client, "op-1", key="k-1").json()
    time.sleep(0.3)

    # Uniqueness still stands behind the forgotten key...
    refused = create(client, "op-1", key="k-1")
    assert refused.status_code == 409
    assert refused.json()["existing_id"] == first["id"]

    # ...and without it a second record is created.
    capabilities(client, unique_external_ref=False)
    second = create(client, "op-1", key="k-1")
    assert second.status_code == 201
    assert second.json()["id"] != first["id"]
    assert stats(client)["records"] == 2


def test_lookup_finds_live_records_and_answers_404_when_off(client: httpx.Client) -> None:
    record = create(client, "op-1").json()
    create(client, "op-2")

    found = client.get("/crm/records", params={"external_ref": "op-1"})
    missing = client.get("/crm/records", params={"external_ref": "nope"})
    assert found.status_code == 200
    assert [r["id"] for r in found.json()["results"]] == [record["id"]]
    assert missing.json() == {"results": []}

    capabilities(client, lookup=False)
    refused = client.get("/crm/records", params={"external_ref": "op-1"})
    assert refused.status_code == 404
    assert refused.json() == {"detail": "lookup not supported"}
    # The listing is an export and stays available.
    listing = client.get("/crm/records", params={"since": "2000-01-01T00:00:00Z"})
    assert listing.status_code == 200
    assert len(listing.json()["results"]) == 2
    assert stats(client)["calls"]["lookup_record"] == 3


def test_the_since_listing_pages_every_live_record_once_in_order(client: httpx.Client) -> None:
    # 700 seeded records share one timestamp (ties ordered by id), 490 more
    # arrive one by one later, 10 older ones fall before `since`.
    seed(client, 10, "old-", "2020-01-01T00:00:00Z")
    seed(client, 700, "seed-", "2026-01-01T00:00:00Z")
    for i in range(490):
        assert create(client, f"op-{i}").status_code == 201
    # A merged record leaves the listing.
    merged = create(client, "dup").json()
    client.post("/crm/records/rec_000011/merge", json={"duplicate_id": merged["id"]})

    seen: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        params = {"since": "2025-12-31T23:00:00+00:00", "limit": 500}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/crm/records", params=params).json()
        seen += page["results"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert pages == 3
    ids = [r["id"] for r in seen]
    assert len(ids) == 1190 == len(set(ids))
    assert merged["id"] not in ids
    assert not any(r["external_ref"].startswith("old-") for r in seen)
    assert seen == sorted(seen, key=lambda r: (r["created_at"], int(r["id"][4:])))


def test_until_bounds_the_listing(client: httpx.Client) -> None:
    seed(client, 3, "a-", "2026-01-01T00:00:00Z")
    seed(client, 3, "b-", "2026-01-02T00:00:00Z")

    page = client.get(
        "/crm/records", params={"since": "2026-01-01T00:00:00Z", "until": "2026-01-02T00:00:00Z"}
    ).json()

    assert [r["external_ref"] for r in page["results"]] == ["a-0", "a-1", "a-2"]
    assert page["next_cursor"] is None


@pytest.mark.parametrize(
    "params",
    [{"limit": "0"}, {"limit": "many"}, {"cursor": "not-a-cursor"}, {"since": "yesterday"}],
)
def test_the_listing_refuses_bad_parameters(client: httpx.Client, params: dict) -> None:
    response = client.get("/crm/records", params={"since": "2026-01-01T00:00:00Z", **params})

    assert response.status_code == 400
    assert "detail" in response.json()


def test_staff_can_patch_and_delete_records(client: httpx.Client) -> None:
    record = create(client, "op-1").json()
    other = create(client, "op-2").json()
    client.post(f"/crm/records/{record['id']}/tasks", json={"external_ref": "t-1", "title": "Call"})

    patched = client.patch(f"/crm/records/{record['id']}", json={"name": "Ada L.", "colour": "red"})
    assert patched.status_code == 200
    assert patched.json()["name"] == "Ada L."
    assert patched.json()["extra"] == {"colour": "red"}
    assert patched.json()["updated_at"] > record["updated_at"]
    taken = client.patch(f"/crm/records/{other['id']}", json={"external_ref": "op-1"})
    assert taken.status_code == 409
    assert taken.json()["existing_id"] == record["id"]

    deleted = client.delete(f"/crm/records/{record['id']}")
    assert deleted.status_code == 204
    assert client.get(f"/crm/records/{record['id']}").status_code == 404
    assert client.delete(f"/crm/records/{record['id']}").status_code == 404
    assert stats(client)["records"] == 1
    assert stats(client)["tasks"] == 0
    # A deleted record's external_ref is free again.
    assert create(client, "op-1").status_code == 201


# -- tasks ----------------------------------------------------------------


def test_tasks_are_unique_per_record_and_can_be_looked_up(client: httpx.Client) -> None:
    first = create(client, "op-1").json()["id"]
    second = create(client, "op-2").json()["id"]
    body = {"external_ref": "t-1", "title": "Call back", "assignee": "sales"}

    task = client.post(f"/crm/records/{first}/tasks", json=body)
    duplicate = client.post(f"/crm/records/{first}/tasks", json=body)
    elsewhere = client.post(f"/crm/records/{second}/tasks", json=body)

    assert task.status_code == 201
    assert task.json() == {
        "id": "task_000001",
        "record_id": first,
        "external_ref": "t-1",
        "title": "Call back",
        "assignee": "sales",
        "due_at": None,
        "created_at": task.json()["created_at"],
    }
    assert duplicate.status_code == 409
    assert duplicate.json()["existing_id"] == "task_000001"
    assert elsewhere.status_code == 201
    found = client.get(f"/crm/records/{first}/tasks", params={"external_ref": "t-1"}).json()
    assert [t["id"] for t in found["results"]] == ["task_000001"]
    assert client.get(f"/crm/records/{first}/tasks").json()["results"] == found["results"]
    assert stats(client)["tasks_by_external_ref"] == {"t-1": 2}

    capabilities(client, lookup=False)
    refused = client.get(f"/crm/records/{first}/tasks", params={"external_ref": "t-1"})
    assert refused.status_code == 404
    assert refused.json() == {"detail": "lookup not supported"}
    assert len(client.get(f"/crm/records/{first}/tasks").json()["results"]) == 1


def test_a_task_on_a_missing_record_is_404(client: httpx.Client) -> None:
    response = client.post("/crm/records/rec_000042/tasks", json={"external_ref": "t-1"})

    assert response.status_code == 404
    assert stats(client)["tasks"] == 0


def test_task_idempotency_keys_have_their_own_key_space(client: httpx.Client) -> None:
    capabilities(client, idempotency_keys=True, unique_external_ref=False)
    # The adapter uses one operation key as record key and task key alike.
    record = create(client, "op-1", key="same").json()["id"]
    path = f"/crm/records/{record}/tasks"

    task = client.post(path, json={"external_ref": "t"}, headers={"Idempotency-Key": "same"})
    again = client.post(path, json={"external_ref": "t"}, headers={"Idempotency-Key": "same"})

    assert task.status_code == 201
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == task.json()["id"]
    assert stats(client)["tasks"] == 1


# -- merge ----------------------------------------------------------------


def test_merge_moves_tasks_and_hides_the_duplicate(client: httpx.Client) -> None:
    capabilities(client, unique_external_ref=False)
    survivor = create(client, "op-1").json()["id"]
    duplicate = create(client, "op-1").json()["id"]
    client.post(f"/crm/records/{duplicate}/tasks", json={"external_ref": "t-1"})

    merged = client.post(f"/crm/records/{survivor}/merge", json={"duplicate_id": duplicate})

    assert merged.status_code == 200
    assert merged.json()["id"] == survivor
    assert client.get(f"/crm/records/{duplicate}").json()["merged_into"] == survivor
    found = client.get("/crm/records", params={"external_ref": "op-1"}).json()["results"]
    assert [r["id"] for r in found] == [survivor]
    tasks = client.get(f"/crm/records/{survivor}/tasks").json()["results"]
    assert [t["external_ref"] for t in tasks] == ["t-1"]
    assert stats(client)["records_by_external_ref"] == {"op-1": 1}
    assert stats(client)["tasks"] == 1
    # Merging again is a no-op that succeeds.
    again = client.post(f"/crm/records/{survivor}/merge", json={"duplicate_id": duplicate})
    assert again.status_code == 200
    # With the duplicate merged away, its external_ref is free for the survivor only.
    capabilities(client, unique_external_ref=True)
    assert create(client, "op-1").json()["existing_id"] == survivor


def test_merge_refuses_missing_and_identical_records(client: httpx.Client) -> None:
    record = create(client, "op-1").json()["id"]

    same = client.post(f"/crm/records/{record}/merge", json={"duplicate_id": record})
    missing = client.post(f"/crm/records/{record}/merge", json={"duplicate_id": "rec_000099"})
    no_survivor = client.post("/crm/records/rec_000099/merge", json={"duplicate_id": record})

    assert same.status_code == 400
    assert missing.status_code == 404
    assert no_survivor.status_code == 404
    assert client.get(f"/crm/records/{record}").json()["merged_into"] is None


def test_merge_honours_idempotency_keys(client: httpx.Client) -> None:
    capabilities(client, idempotency_keys=True, unique_external_ref=False)
    survivor = create(client, "op-1").json()["id"]
    duplicate = create(client, "op-1").json()["id"]
    path, body = f"/crm/records/{survivor}/merge", {"duplicate_id": duplicate}

    first = client.post(path, json=body, headers={"Idempotency-Key": "merge-1"})
    again = client.post(path, json=body, headers={"Idempotency-Key": "merge-1"})

    assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == survivor


# -- faults over HTTP -----------------------------------------------------


@pytest.mark.parametrize("action", ["create_record", "create_task"])
def test_fail_before_commit_stores_nothing(client: httpx.Client, action: str) -> None:
    post, count = _creator(client, action)
    fault(client, action, "fail_before_commit")

    response = post("ref-1")

    assert response.status_code == 500
    assert response.json() == {"detail": "injected failure before commit"}
    assert count() == 0
    assert post("ref-1").status_code == 201
    assert count() == 1


@pytest.mark.parametrize("action", ["create_record", "create_task"])
def test_drop_response_after_commit_stores_then_hangs_up(client: httpx.Client, action: str) -> None:
    capabilities(client, idempotency_keys=True)
    post, count = _creator(client, action)
    fault(client, action, "drop_response_after_commit")

    with pytest.raises(httpx.RemoteProtocolError):
        post("ref-1", key="k-1")

    assert count() == 1
    # The key was remembered with the commit: the retry gets the same thing.
    retry = post("ref-1", key="k-1")
    assert retry.status_code == 200
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert count() == 1


@pytest.mark.parametrize("action", ["create_record", "create_task"])
def test_http_500_after_commit_stores_then_fails(client: httpx.Client, action: str) -> None:
    post, count = _creator(client, action)
    fault(client, action, "http_500_after_commit")

    response = post("ref-1")

    assert response.status_code == 500
    assert count() == 1
    assert post("ref-1").status_code == 409


@pytest.mark.parametrize("action", ["create_record", "create_task"])
@pytest.mark.parametrize(("mode", "status"), [("http_429", 429), ("http_503", 503)])
def test_throttling_faults_store_nothing_and_say_when_to_retry(
    client: httpx.Client, action: str, mode: str, status: int
) -> None:
    post, count = _creator(client, action)
    fault(client, action, mode, seconds=3)

    response = post("ref-1")

    assert response.status_code == status
    assert response.headers["Retry-After"] == "3"
    assert count() == 0


@pytest.mark.parametrize("action", ["create_record", "create_task"])
def test_http_400_stores_nothing(client: httpx.Client, action: str) -> None:
    post, count = _creator(client, action)
    fault(client, action, "http_400")

    response = post("ref-1")

    assert response.status_code == 400
    assert response.json() == {"detail": "injected validation error"}
    assert count() == 0


@pytest.mark.parametrize("action", ["create_record", "create_task"])
def test_slow_waits_then_processes(client: httpx.Client, action: str) -> None:
    post, count = _creator(client, action)
    fault(client, action, "slow", seconds=0.5)

    started = time.monotonic()
    response = post("ref-1")

    assert time.monotonic() - started >= 0.5
    assert response.status_code == 201
    assert count() == 1


def test_faults_queue_up_in_order_and_can_be_cleared(client: httpx.Client) -> None:
    fault(client, "create_record", "http_503", times=2)
    fault(client, "create_record", "http_400")
    fault(client, "send_email", "slow")
    assert client.get("/_sandbox/faults").json()["results"][0] == {
        "action": "create_record",
        "mode": "http_503",
        "times": 2,
        "seconds": 1.0,
    }

    statuses = [create(client, f"op-{i}").status_code for i in range(4)]

    assert statuses == [503, 503, 400, 201]
    assert [f["action"] for f in client.get("/_sandbox/faults").json()["results"]] == ["send_email"]
    assert client.delete("/_sandbox/faults").status_code == 200
    assert client.get("/_sandbox/faults").json() == {"results": []}


def test_an_invalid_request_does_not_consume_a_fault(client: httpx.Client) -> None:
    fault(client, "create_record", "http_503")
    fault(client, "create_task", "http_503")

    bad_json = client.post(
        "/crm/records", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    no_record = client.post("/crm/records/rec_000009/tasks", json={"external_ref": "t"})

    assert bad_json.status_code == 400
    assert no_record.status_code == 404
    assert len(client.get("/_sandbox/faults").json()["results"]) == 2


@pytest.mark.parametrize(
    "body",
    [
        {"action": "create_record", "mode": "explode"},
        {"action": "delete_everything", "mode": "slow"},
        {"action": "create_record", "mode": "slow", "times": 0},
        {"action": "create_record", "mode": "slow", "seconds": "long"},
    ],
)
def test_invalid_faults_are_refused(client: httpx.Client, body: dict) -> None:
    assert client.post("/_sandbox/faults", json=body).status_code == 400
    assert client.get("/_sandbox/faults").json() == {"results": []}


def _creator(
    client: httpx.Client, action: str
) -> tuple[Callable[..., httpx.Response], Callable[[], int]]:
    """A create function for `action` (records, or tasks on one record) and a counter."""
    if action == "create_record":

        def post_record(ref: str, key: str | None = None) -> httpx.Response:
            return create(client, ref, **({"key": key} if key else {}))

        return post_record, lambda: stats(client)["records"]

    record = create(client, "parent").json()["id"]

    def post_task(ref: str, key: str | None = None) -> httpx.Response:
        headers = {"Idempotency-Key": key} if key else {}
        return client.post(
            f"/crm/records/{record}/tasks",
            json={"external_ref": ref, "title": "Call back", "assignee": "sales"},
            headers=headers,
        )

    return post_task, lambda: stats(client)["tasks"]


# -- the mail sink --------------------------------------------------------


def test_the_sink_stores_messages_with_headers_and_body(
    client: httpx.Client, server: SandboxServer
) -> None:
    send(server, email(to="ada@example.com", message_id="<m1@onefold.test>"))
    send(server, email(to="bob@example.com", message_id="<m2@onefold.test>", subject="Again"))

    messages = client.get("/_sandbox/messages").json()["results"]

    assert len(messages) == 2
    first = messages[0]
    assert first["mail_from"] == "enquiries@onefold.invalid"
    assert first["rcpt_to"] == ["ada@example.com"]
    assert first["message_id"] == "<m1@onefold.test>"
    assert first["subject"] == "Thanks"
    assert first["headers"]["To"] == "ada@example.com"
    assert first["body"] == "We received your enquiry.\n"
    assert first["html"] is None
    assert first["received_at"].endswith("Z")
    counts = stats(client)
    assert counts["messages"] == 2
    assert counts["messages_by_recipient"] == {"ada@example.com": 1, "bob@example.com": 1}
    assert counts["messages_by_message_id"] == {"<m1@onefold.test>": 1, "<m2@onefold.test>": 1}
    assert counts["calls"]["send_email"] == 2


def test_the_sink_gives_the_text_and_the_html_parts_apart(
    client: httpx.Client, server: SandboxServer
) -> None:
    message = email()
    message["Reply-To"] = "office@example.com"
    message.add_alternative("<p>We received <b>your</b> enquiry.</p>\n", subtype="html")
    send(server, message)

    (stored,) = client.get("/_sandbox/messages").json()["results"]

    assert stored["body"] == "We received your enquiry.\n"
    assert stored["html"] == "<p>We received <b>your</b> enquiry.</p>\n"
    assert stored["headers"]["Reply-To"] == "office@example.com"
    assert stored["headers"]["Content-Type"].startswith("multipart/alternative")


def test_a_task_keeps_its_due_date_in_utc(client: httpx.Client) -> None:
    record = create(client, "op-1").json()["id"]
    body = {"external_ref": "t-1", "title": "Call", "assignee": "ana"}
    due = client.post(
        f"/crm/records/{record}/tasks", json={**body, "due_at": "2026-11-30T11:15:00+01:00"}
    )
    wrong = client.post(
        f"/crm/records/{record}/tasks", json={**body, "external_ref": "t-2", "due_at": "soon"}
    )
    assert due.status_code == 201 and due.json()["due_at"] == "2026-11-30T10:15:00.000000Z"
    assert wrong.status_code == 400


def test_configured_keys_of_a_record_are_kept_in_extra(client: httpx.Client) -> None:
    response = create(
        client, "op-1", company="Acme", contact={"company": "Acme"}, pipeline="p", stage="s"
    )
    assert response.json()["extra"] == {
        "company": "Acme",
        "contact": {"company": "Acme"},
        "pipeline": "p",
        "stage": "s",
    }


@pytest.mark.parametrize(
    ("mode", "code", "reply"),
    [
        ("fail_before_commit", 451, b"4.3.0 injected failure before commit"),
        ("http_429", 421, b"4.7.0 try again later"),
        ("http_503", 421, b"4.7.0 try again later"),
        ("http_400", 550, b"5.1.1 mailbox unavailable"),
    ],
)
def test_refusing_sink_faults_store_nothing(
    client: httpx.Client, server: SandboxServer, mode: str, code: int, reply: bytes
) -> None:
    fault(client, "send_email", mode)

    # Refused at RCPT, before the body goes out: the sender knows nothing was delivered.
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        send(server, email())

    assert list(refused.value.recipients.values()) == [(code, reply)]
    assert stats(client)["messages"] == 0
    send(server, email())
    assert stats(client)["messages"] == 1


def test_drop_response_after_commit_stores_the_message_then_hangs_up(
    client: httpx.Client, server: SandboxServer
) -> None:
    fault(client, "send_email", "drop_response_after_commit")

    with pytest.raises(smtplib.SMTPServerDisconnected):
        send(server, email())

    assert stats(client)["messages_by_message_id"] == {"<m1@onefold.test>": 1}


def test_http_500_after_commit_stores_the_message_then_fails(
    client: httpx.Client, server: SandboxServer
) -> None:
    fault(client, "send_email", "http_500_after_commit")

    with pytest.raises(smtplib.SMTPDataError) as refused:
        send(server, email())

    assert refused.value.smtp_code == 451
    assert refused.value.smtp_error == b"4.3.0 injected failure after commit"
    assert stats(client)["messages"] == 1


def test_slow_sink_waits_then_stores(client: httpx.Client, server: SandboxServer) -> None:
    fault(client, "send_email", "slow", seconds=0.5)

    started = time.monotonic()
    send(server, email())

    assert time.monotonic() - started >= 0.5
    assert stats(client)["messages"] == 1


# -- concurrency ----------------------------------------------------------


def _race(
    server: SandboxServer, n: int, request: Callable[[httpx.Client], httpx.Response]
) -> list[httpx.Response]:
    """Runs `request(http)` in n threads released together by a barrier."""
    barrier = threading.Barrier(n)
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    def compete() -> None:
        with httpx.Client(base_url=server.http_url, timeout=30) as http:
            barrier.wait()
            response = request(http)
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=compete) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return responses


def test_concurrent_creates_of_one_external_ref_make_one_record(
    client: httpx.Client, server: SandboxServer
) -> None:
    # Real threads over real sockets: the point is the server's lock.
    for round_ in range(3):
        ref = f"race-{round_}"
        responses = _race(server, 20, lambda http, ref=ref: create(http, ref))

        statuses = sorted(r.status_code for r in responses)
        assert statuses == [201] + [409] * 19
        winner = next(r.json()["id"] for r in responses if r.status_code == 201)
        assert {r.json()["existing_id"] for r in responses if r.status_code == 409} == {winner}
        assert stats(client)["records_by_external_ref"][ref] == 1


def test_concurrent_creates_with_one_idempotency_key_make_one_record(
    client: httpx.Client, server: SandboxServer
) -> None:
    capabilities(client, idempotency_keys=True, unique_external_ref=False)

    responses = _race(server, 20, lambda http: create(http, "op-1", key="k-1"))

    assert sorted(r.status_code for r in responses) == [200] * 19 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert stats(client)["records"] == 1


# -- control --------------------------------------------------------------


def test_reset_empties_everything_and_restores_default_capabilities(
    client: httpx.Client, server: SandboxServer
) -> None:
    capabilities(client, idempotency_keys=True, lookup=False)
    record = create(client, "op-1").json()["id"]
    client.post(f"/crm/records/{record}/tasks", json={"external_ref": "t-1"})
    send(server, email())
    fault(client, "create_record", "slow")

    assert client.post("/_sandbox/reset").status_code == 200

    assert client.get("/_sandbox/capabilities").json() == {
        "idempotency_keys": False,
        "unique_external_ref": True,
        "lookup": True,
        "idempotency_key_ttl_seconds": 86400.0,
    }
    counts = stats(client)
    assert (counts["records"], counts["tasks"], counts["messages"]) == (0, 0, 0)
    assert set(counts["calls"].values()) == {0}
    assert client.get("/_sandbox/messages").json() == {"results": []}
    assert client.get("/_sandbox/faults").json() == {"results": []}
    assert create(client, "op-1").json()["id"] == "rec_000001"


@pytest.mark.parametrize(
    "body",
    [
        {"lookup": "yes"},
        {"idempotency_keys": 1},
        {"idempotency_key_ttl_seconds": -1},
        {"idempotency_key_ttl_seconds": True},
        {"teleport": True},
    ],
)
def test_capabilities_are_validated(client: httpx.Client, body: dict) -> None:
    response = client.post("/_sandbox/capabilities", json=body)

    assert response.status_code == 400
    assert client.get("/_sandbox/capabilities").json()["lookup"] is True


def test_protocol_errors_answer_json(client: httpx.Client) -> None:
    unknown = client.get("/crm/nothing-here")
    bad_json = client.post("/crm/records", content=b"[1,", headers={"Content-Type": "x"})
    not_object = client.post("/crm/records", json=[1, 2])
    wrong_type = client.post("/crm/records", json={"external_ref": 42})
    wrong_method = client.put("/crm/records")

    assert unknown.status_code == 404 and "detail" in unknown.json()
    assert bad_json.status_code == 400 and "detail" in bad_json.json()
    assert not_object.status_code == 400
    assert wrong_type.status_code == 400
    assert wrong_method.status_code == 405
    assert stats(client)["records"] == 0


@pytest.mark.serial  # timed
def test_seed_creates_a_hundred_thousand_records_quickly(client: httpx.Client) -> None:
    started = time.monotonic()
    response = client.post("/_sandbox/seed", json={"count": 100_000, "prefix": "bench-"})
    elapsed = time.monotonic() - started

    assert response.json() == {"created": 100_000}
    assert elapsed < 10
    counts = client.get("/_sandbox/stats", params={"detail": "0"}).json()
    assert counts["records"] == 100_000
    assert "records_by_external_ref" not in counts
    found = client.get("/crm/records", params={"external_ref": "bench-99999"}).json()["results"]
    assert len(found) == 1
    # The listing pages through in constant-size steps to the end.
    page = client.get("/crm/records", params={"since": "2000-01-01T00:00:00Z", "limit": 5000})
    assert len(page.json()["results"]) == 5000
    assert page.json()["next_cursor"]


def test_a_file_database_survives_a_restart(tmp_path: Path) -> None:
    db = str(tmp_path / "sandbox.sqlite3")
    with SandboxServer(http_port=0, smtp_port=0, db_path=db) as sandbox:
        record = httpx.post(f"{sandbox.http_url}/crm/records", json={"external_ref": "op-1"})
        httpx.post(f"{sandbox.http_url}/_sandbox/capabilities", json={"lookup": False})

    with SandboxServer(http_port=0, smtp_port=0, db_path=db) as sandbox:
        again = httpx.get(f"{sandbox.http_url}/crm/records/{record.json()['id']}")
        caps = httpx.get(f"{sandbox.http_url}/_sandbox/capabilities").json()

    assert again.json() == record.json()
    assert caps["lookup"] is False


def test_a_file_from_an_older_sandbox_gains_the_new_columns(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite3"
    with sqlite3.connect(db) as old:
        # The tables as the sandbox made them before tasks had due dates and messages HTML.
        old.executescript(
            "CREATE TABLE tasks (seq INTEGER PRIMARY KEY AUTOINCREMENT, record_seq INTEGER "
            "NOT NULL, external_ref TEXT, title TEXT NOT NULL DEFAULT '', assignee TEXT NOT "
            "NULL DEFAULT '', created_at TEXT NOT NULL);"
            "CREATE TABLE messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, mail_from TEXT NOT "
            "NULL, rcpt_to TEXT NOT NULL, message_id TEXT, subject TEXT, headers TEXT NOT "
            "NULL, body TEXT NOT NULL, received_at TEXT NOT NULL);"
        )
    with SandboxServer(http_port=0, smtp_port=0, db_path=str(db)) as sandbox:
        record = httpx.post(f"{sandbox.http_url}/crm/records", json={"external_ref": "op-1"})
        task = httpx.post(
            f"{sandbox.http_url}/crm/records/{record.json()['id']}/tasks",
            json={"title": "Call", "due_at": "2026-11-30T10:15:00Z"},
        )
    assert task.status_code == 201 and task.json()["due_at"] == "2026-11-30T10:15:00.000000Z"


# -- the management command -----------------------------------------------


def test_the_command_serves_until_sigterm_and_exits_cleanly(tmp_path: Path) -> None:
    stderr_path = tmp_path / "sandbox.stderr"
    env = dict(os.environ)
    # An unreachable app database proves the command never touches it.
    env["DATABASE_URL"] = "postgres://nobody@127.0.0.1:9/none"
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "sandbox", "--http-port", "0", "--smtp-port", "0"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert process.stdout is not None
    stdout = process.stdout
    output: queue.Queue[str] = queue.Queue()

    def pump_stdout() -> None:
        for line in stdout:
            output.put(line)

    # A thread reads stdout so that a silent sandbox fails the test instead of hanging it.
    pump = threading.Thread(target=pump_stdout, daemon=True)
    pump.start()
    try:
        lines = _next_lines(output, 2, timeout=60, process=process)
        assert lines[0].startswith("Sandbox CRM listening on http://127.0.0.1:"), lines
        assert lines[1].startswith("Sandbox SMTP listening on 127.0.0.1:"), lines
        crm_url = lines[0].removeprefix("Sandbox CRM listening on ")
        smtp_port = int(lines[1].rsplit(":", 1)[1])

        created = httpx.post(f"{crm_url}/crm/records", json={"external_ref": "op-1"})
        assert created.status_code == 201
        with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as smtp:
            smtp.send_message(email())
        assert httpx.get(f"{crm_url}/_sandbox/stats").json()["messages"] == 1

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, stderr_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        pump.join(timeout=5)
        stdout.close()


def _next_lines(
    lines: queue.Queue[str], count: int, *, timeout: float, process: subprocess.Popen
) -> list[str]:
    """Takes `count` lines from the queue, failing (not hanging) if they do not come."""
    deadline = time.monotonic() + timeout
    received: list[str] = []
    while len(received) < count:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"sandbox printed {received} within {timeout}s (exit {process.poll()})")
        received.append(line.rstrip("\n"))
    return received


def test_chaos_faults_a_share_of_calls_and_reset_turns_it_off(
    client: httpx.Client, server: SandboxServer
) -> None:
    response = client.post(
        "/_sandbox/chaos",
        json={"rate": 0.5, "modes": ["http_503"], "actions": ["create_record"], "seed": 7},
    )
    assert response.status_code == 200
    codes = [
        client.post("/crm/records", json={"external_ref": f"c{i}", "name": "x"}).status_code
        for i in range(200)
    ]
    assert 60 < codes.count(503) < 140
    assert codes.count(503) + codes.count(201) == 200
    assert stats(client)["records"] == codes.count(201)
    client.post("/_sandbox/reset")
    assert client.get("/_sandbox/chaos").json() == {"rate": 0}
    assert (
        client.post("/crm/records", json={"external_ref": "after", "name": "x"}).status_code == 201
    )


def test_chaos_rejects_nonsense(client: httpx.Client) -> None:
    assert (
        client.post("/_sandbox/chaos", json={"rate": 2, "modes": ["http_503"]}).status_code == 400
    )
    assert client.post("/_sandbox/chaos", json={"rate": 0.1, "modes": ["boom"]}).status_code == 400
    assert client.post("/_sandbox/chaos", json={"rate": 0.1}).status_code == 400
