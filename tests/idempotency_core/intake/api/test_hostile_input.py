"""The hostile-input corpus: bodies and headers that once reached a 500 or the database.

Each case is sent to the ingest API and must be answered 4xx (never 5xx) with
nothing stored but, where the source is known, one content-free delivery row (no
event, no operation, no fingerprint, no body). Bodies go through Django's test
client; what only a real HTTP server does (joining repeated headers with a comma,
chunked transfer, raw latin-1 header bytes) goes over a socket to gunicorn.

The strict reader's other caller, the hooks' JSON parser, is held to the same
corpus, and a few bodies at the edges of the rules show what is still accepted.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from rest_framework.test import APIClient

from idempotency_core.intake.senders.parsing import MalformedDeliveryError, parse_body
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Delivery, Event, Operation
from tests.factories import URL, post, submission
from tests.support.processes import WebServer

CONTACT = '"contact": {"name": "Ada Lovelace", "email": "ada@example.com"}'


def spliced(entries: str) -> bytes:
    """A submission whose remaining top-level entries are written raw (what a JSON
    encoder would never produce)."""
    return f'{{"form": "contact", {CONTACT}, {entries}}}'.encode()


def nested(depth: int) -> bytes:
    return spliced(f'"fields": {{"a": {"[" * depth}{"]" * depth}}}')


def assert_nothing_stored_but_a_counted_delivery() -> None:
    assert Event.objects.count() == 0
    assert Operation.objects.count() == 0
    deliveries = list(Delivery.objects.all())
    assert len(deliveries) <= 1
    for delivery in deliveries:
        assert delivery.event_id is None
        assert delivery.fingerprint == ""
        assert delivery.payload_matched is None
        assert delivery.raw_body is None
        assert (delivery.content_type, delivery.verification) == ("", "")


def assert_refused(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:500]
    data: dict[str, Any] = response.json()
    assert data["code"] == code, data
    assert_nothing_stored_but_a_counted_delivery()
    return data


# -- bodies the strict reader refuses (400 invalid_json) ---------------------------

UNREADABLE = [
    pytest.param(spliced('"fields": {"x": NaN}'), id="nan"),
    pytest.param(spliced('"fields": {"x": Infinity}'), id="infinity"),
    pytest.param(spliced('"fields": {"x": -Infinity}'), id="minus-infinity"),
    pytest.param(spliced('"fields": {"x": 1e999}'), id="1e999"),
    pytest.param(spliced('"fields": {"x": -1e999}'), id="minus-1e999"),
    pytest.param(spliced('"fields": {"x": ' + "9" * 5000 + "}"), id="5000-digit-integer"),
    pytest.param(spliced('"fields": {"x": ' + "9" * 101 + "}"), id="101-digit-integer"),
    pytest.param(spliced('"fields": {"x": 0.' + "1" * 200 + "}"), id="200-digit-fraction"),
    pytest.param(spliced('"fields": {"x": "a\\u0000b"}'), id="nul-in-fields"),
    pytest.param(spliced('"fields": {"x": "\\udc00"}'), id="lone-low-surrogate-in-fields"),
    pytest.param(spliced('"fields": {"x": ["\\ud800"]}'), id="lone-high-surrogate-in-a-list"),
    pytest.param(spliced('"fields": {"x\\u0000": 1}'), id="nul-in-a-fields-name"),
    pytest.param(spliced('"col\\u0000our": "red"'), id="nul-in-an-unknown-key"),
    pytest.param(spliced('"col\\udc00our": "red"'), id="surrogate-in-an-unknown-key"),
    pytest.param(spliced('"message": "hi\\u0000"'), id="nul-in-the-message"),
    pytest.param(spliced('"submission_id": "k\\u0000"'), id="nul-in-the-key"),
    pytest.param(spliced('"submission_id": "\\udc00"'), id="surrogate-as-the-key"),
    pytest.param(nested(33), id="nested-33-deep"),
    pytest.param(nested(30_000), id="nested-30000-deep-within-64k"),
    pytest.param(b'{"a":' * 10_000 + b"1" + b"}" * 10_000, id="objects-10000-deep"),
    pytest.param(spliced('"form": "again"'), id="duplicate-key"),
    pytest.param(spliced('"fields": {"x": 1, "x": 2}'), id="duplicate-nested-key"),
    pytest.param(spliced('"message": "café"').replace("é".encode(), b"\xe9"), id="latin-1"),
    pytest.param(json.dumps(submission()).encode("utf-16"), id="utf-16-with-bom"),
    pytest.param(json.dumps(submission()).encode("utf-16-le"), id="utf-16-without-bom"),
    pytest.param(b"\xef\xbb\xbf" + json.dumps(submission()).encode(), id="utf-8-bom"),
    pytest.param(b'"\\"' * 20_000, id="unterminated-escapes"),
    pytest.param(json.dumps(submission()).encode() + b" {}", id="trailing-data"),
    pytest.param(b"[" + json.dumps(submission()).encode() + b"]", id="array-of-a-submission"),
    pytest.param(b"null", id="null"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\x00", id="a-nul-byte"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("body", UNREADABLE)
def test_unreadable_json_is_refused_and_nothing_is_stored(api, body):
    assert_refused(post(api, body), 400, "invalid_json")


# Hooks read any JSON value that parses (a one-element array of objects as that
# object, anything else not an object as {"body": ...}, kept for a map that reads it).
@pytest.mark.parametrize(
    "body", [p for p in UNREADABLE if p.id not in ("array-of-a-submission", "null")]
)
def test_the_hooks_json_reader_refuses_the_same_bodies(body):
    with pytest.raises(MalformedDeliveryError):
        parse_body(body, content_type="application/json", parser="json")


# -- readable bodies the serializer refuses (400 invalid, with field errors) -------

INVALID = [
    pytest.param(submission(message=42), {"message"}, id="message-a-number"),
    pytest.param(submission(form=["contact"]), {"form"}, id="form-a-list"),
    pytest.param(submission(form=True), {"form"}, id="form-a-boolean"),
    pytest.param(submission(colour="red"), {"colour"}, id="unknown-top-level-key"),
    pytest.param(submission(colour="red", form=7), {"colour", "form"}, id="unknown-and-invalid"),
    pytest.param(
        submission(contact={"name": "Ada", "email": "ada@example.com", "age": 36}),
        {"contact"},
        id="unknown-contact-key",
    ),
    pytest.param(
        submission(contact={"name": 36, "email": "ada@example.com"}),
        {"contact"},
        id="name-a-number",
    ),
    pytest.param(submission(submitted_at=1764410100), {"submitted_at"}, id="time-a-number"),
    pytest.param(submission(submitted_at="2026-11-29T10:15:00"), {"submitted_at"}, id="naive-time"),
    pytest.param(
        submission(submitted_at="0001-01-01T00:00:00+01:00"), {"submitted_at"}, id="year-0"
    ),
    pytest.param(submission(fields=[1]), {"fields"}, id="fields-a-list"),
    pytest.param(submission(fields={"a": [[["deep"]]]}), {"fields"}, id="fields-three-deep"),
    pytest.param(submission(fields={"a": {"b": {"c": {}}}}), {"fields"}, id="fields-objects-deep"),
    pytest.param(submission(submission_id="a,b"), {"submission_id"}, id="submission-id-comma"),
    pytest.param(submission(revises="x" * 256), {"revises"}, id="revises-too-long"),
    pytest.param(
        submission(contact={"name": "Ada", "email": "é@example.com"}), {"contact"}, id="email-local"
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "fields"), INVALID)
def test_invalid_fields_are_named_and_nothing_is_stored(api, body, fields):
    data = assert_refused(post(api, body), 400, "invalid")
    assert set(data["errors"]) == fields


@pytest.mark.django_db
def test_an_unknown_key_gets_its_own_field_error(api):
    data = assert_refused(post(api, submission(colour="red")), 400, "invalid")
    assert data["errors"] == {"colour": ["Unknown field."]}


# -- media types and sizes ---------------------------------------------------------

MEDIA_TYPES = [
    pytest.param("text/plain", id="text-plain"),
    pytest.param("application/json; charset=latin1", id="json-in-latin1"),
    pytest.param("application/json; charset=utf-16", id="json-in-utf16"),
    pytest.param("multipart/form-data; boundary=x", id="multipart"),
    pytest.param("application/x-www-form-urlencoded", id="form-encoded"),
    pytest.param("application/json-patch+json", id="json-patch"),
    pytest.param("", id="none"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("content_type", MEDIA_TYPES)
def test_other_media_types_are_refused(api, content_type):
    # generic(): the client's post() would encode the body for the media type.
    body = json.dumps(submission()).encode()
    response = api.generic("POST", URL, body, content_type=content_type, HTTP_IDEMPOTENCY_KEY="k-1")
    assert_refused(response, 415, "unsupported_media_type")


@pytest.mark.django_db
def test_utf8_named_as_the_charset_is_accepted(api):
    response = api.post(
        URL,
        data=json.dumps(submission()),
        content_type='application/json; charset="UTF-8"',
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    assert response.status_code == 202


@pytest.mark.django_db
def test_a_bomb_over_the_limit_is_refused_before_it_is_read(api):
    bomb = spliced('"fields": {"a": [' + ",".join(["[]"] * 40_000) + "]}")
    assert_refused(post(api, bomb), 413, "body_too_large")


# -- header tricks through the test client (what reaches the view) -----------------

KEYS = [
    pytest.param("a,b", id="two-headers-joined"),
    pytest.param("k-1\n", id="trailing-newline"),
    pytest.param("k-1\r\n", id="trailing-crlf"),
    pytest.param("\nk-1", id="leading-newline"),
    pytest.param("k,", id="comma"),
    pytest.param("x" * 256, id="256-characters"),
    pytest.param("k 1", id="space"),
    pytest.param("k\t1", id="tab"),
    pytest.param("caf\xe9", id="latin-1-character"),
    pytest.param("k\x7f", id="delete"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("key", KEYS)
def test_keys_outside_the_contract_are_refused(api, key):
    assert_refused(post(api, submission(), key=key), 400, "idempotency_key_invalid")


@pytest.mark.django_db
@pytest.mark.parametrize("key", KEYS)
def test_the_same_rule_holds_for_submission_id(api, key):
    response = post(api, submission(submission_id=key), key=None)
    assert_refused(response, 400, "idempotency_key_invalid")


@pytest.mark.django_db
def test_keys_of_every_allowed_character_are_accepted(api):
    allowed = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != ",")
    assert post(api, submission(), key=allowed).status_code == 202
    assert post(api, submission(), key="k" * 255).status_code == 202


AUTHORIZATIONS = [
    pytest.param("Api-Key {key}, Api-Key {key}", id="two-keys-joined"),
    pytest.param("Api-Key {key} {key}", id="key-then-more"),
    pytest.param("Api-Key ", id="scheme-alone"),
    pytest.param("Api-Key {key}\x00", id="nul-after-the-key"),
    pytest.param("Bearer {key}", id="another-scheme"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("header", AUTHORIZATIONS)
def test_authorization_tricks_are_401(source_and_key, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header.format(key=source_and_key[1]))
    response = post(client, submission())
    assert response.status_code == 401
    assert_nothing_stored_but_a_counted_delivery()


# -- what still passes: the rules are not wider than the contract ------------------


@pytest.mark.django_db
def test_what_senders_really_send_is_accepted_and_stored_as_validated(api):
    body = submission(
        contact={"name": "Zoë 😀 Ünal", "email": "zoe.o'neil+quote@example.co.uk", "phone": ""},
        message="  two spaces kept  \n",
        fields={
            "newsletter": True,
            "rooms": 3,
            "area": 12.5,
            "extras": ["oven", "hob"],
            "address": {"city": "York", "floor": None},
            "files": [{"name": "plan.pdf", "size": 1024}],
        },
        submitted_at="2026-11-29T11:15:00+01:00",
    )
    response = post(api, body)
    assert response.status_code == 202, response.content
    stored = Event.objects.get().payload
    # Dates are written back in UTC; everything else is what was validated, as sent.
    assert stored == {**body, "submitted_at": "2026-11-29T10:15:00Z"}
    assert post(api, body).status_code == 200  # the same body again is a repeat


# -- over a socket: what only a real server does -----------------------------------


@pytest.fixture
def wire(web_server: WebServer) -> tuple[str, str]:
    *_, key = source_create_with_key(name="wire")
    return web_server.url, key


def _chunks() -> Iterator[bytes]:
    body = json.dumps(submission()).encode()
    yield body[:10]
    yield body[10:]


WIRE = [
    pytest.param(
        {"headers": [("Idempotency-Key", "a"), ("Idempotency-Key", "b")]},
        400,
        "idempotency_key_invalid",
        id="two-idempotency-key-headers",
    ),
    pytest.param(
        {"headers": [("Idempotency-Key", "caf\xe9".encode("latin-1"))]},
        400,
        "idempotency_key_invalid",
        id="latin-1-key-bytes",
    ),
    pytest.param(
        {"headers": [("Idempotency-Key", "k-1")], "content": _chunks},
        411,
        "length_required",
        id="chunked-body",
    ),
    pytest.param(
        {"headers": [("Idempotency-Key", "k-1")], "content": lambda: b"x" * (65 * 1024)},
        413,
        "body_too_large",
        id="over-the-limit-on-the-wire",
    ),
    pytest.param(
        {"headers": [("Idempotency-Key", "k-1")], "authorization": 2},
        401,
        "authentication_failed",
        id="two-authorization-headers",
    ),
]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_wire_tricks_are_refused_by_the_running_server(wire):
    """Each trick in turn against one gunicorn (one per trick was most of the time);
    a failure names the trick."""
    base_url, key = wire
    for trick in WIRE:
        Delivery.objects.all().delete()  # each trick's own counted delivery, alone
        request_parts, status, code = trick.values
        headers = [("Content-Type", "application/json"), *request_parts["headers"]]
        headers += [("Authorization", f"Api-Key {key}")] * request_parts.get("authorization", 1)
        make_content = request_parts.get("content", lambda: json.dumps(submission()).encode())
        # A connection of its own for each trick: gunicorn closes one whose body it
        # did not drain (a 413's), and a client that reused it could race the close.
        with httpx.Client(base_url=base_url, timeout=30) as client:
            response = client.post(URL, headers=headers, content=make_content())
        try:
            assert_refused(response, status, code)
        except AssertionError as exc:
            raise AssertionError(f"{trick.id}: {exc}") from exc


@pytest.mark.slow
@pytest.mark.serial  # timed against gunicorn's wait for a request
def test_the_test_server_answers_a_client_that_stalls_before_its_request(web_server: WebServer):
    """The harness's gunicorn answers a client that connects and only sends its request
    8 s later (gunicorn's defaults close such a connection unanswered after about 7 s)."""
    host, port = web_server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        time.sleep(8)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = sock.recv(64)
    assert answer.startswith(b"HTTP/1.1 200"), answer
