"""Hooks under abuse: hostile bodies, credential floods, odd timestamps, probing.

Each test is one finding of an outside review of the hooks, sent through the real
view (Django's test client) to the real database:

- parsing stays linear: a 64 KB hostile body is answered in under 50 ms;
- a flood of wrong credentials neither spends the source's rate nor writes a
  row per attempt, and a limit per client address applies before verification;
- a timestamp that is NaN, infinite, absurd or an all-digit overflow is a 4xx,
  never a 500, and a signature never stays fresh for ever;
- an unknown source and a wrong credential get the very same answer; `form.js`
  answers only for an `html` source's own hook;
- the public `html` hook is no spam relay: a fourth confirmation to one address in a
  day is held, not sent, and a spammer's text is never the greeting;
- a browser is sent only to an https thank-you page (or http on this machine).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.db.models import Sum
from django.test import Client

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.senders.profiles import PRESETS
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Delivery, Event, ReviewCase, Source
from tests.support.senders import (
    SAMPLES,
    SECRET,
    Sample,
    deliver,
    hook_source,
    sample_without_contact,
    signed_headers,
)

pytestmark = pytest.mark.django_db

# A 64 KB body must be answered within this (the figure, on a quiet machine).
HOSTILE_BODY_BUDGET_SECONDS = 0.050
HOSTILE_BODY_BYTES = 63 * 1024


@pytest.fixture(autouse=True)
def _fresh_rate_counts() -> Iterator[None]:
    # The rate counts live in the cache, which outlives a test's transaction.
    cache.clear()
    yield
    cache.clear()


def fastest(call: Callable[[], Any], *, runs: int = 5) -> tuple[float, Any]:
    """The shortest of `runs` timings and the last answer. Timed in this process's CPU
    (the view parses in process, Django's test client): time spent waiting for a core
    that other work holds is not the code's, and wall time failed the budget when the
    suite ran on two Pythons at once. The machine's other load only ever adds, so the
    minimum is the fairest reading of the code's cost."""
    best, answer = float("inf"), None
    for _ in range(runs):
        started = time.process_time()
        answer = call()
        best = min(best, time.process_time() - started)
    return best, answer


def multipart(parts: list[tuple[str, bytes]], boundary: str = "xyz") -> tuple[bytes, str]:
    body = b"".join(
        b'--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
        % (boundary.encode(), name.encode(), value)
        for name, value in parts
    )
    return body + b"--%s--\r\n" % boundary.encode(), f"multipart/form-data; boundary={boundary}"


def nested_multipart(depth: int) -> tuple[bytes, str]:
    """Each part a multipart of its own, `depth` levels down."""
    body = b""
    for level in range(depth):
        body += (
            b'--b%d\r\nContent-Disposition: form-data; name="n"\r\n'
            b"Content-Type: multipart/mixed; boundary=b%d\r\n\r\n" % (level, level + 1)
        )
    for level in reversed(range(depth)):
        body += b"\r\n--b%d--\r\n" % level
    return body, "multipart/form-data; boundary=b0"


# -- F1: parsing is linear -------------------------------------------------------------


# Timed: never beside another test that keeps a core busy (tests/conftest.py).
@pytest.mark.serial
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"a=&" * (HOSTILE_BODY_BYTES // 3), id="a=&a=&..."),
        # As many fields as a form may have, each as long as the body allows.
        pytest.param(b"&".join(b"a%d=%s" % (n, b"v" * 55) for n in range(1000)), id="1000-full"),
    ],
)
def test_a_64_kb_form_body_is_answered_in_under_50_ms(body):
    _, path = hook_source("html")
    client = Client()
    seconds, response = fastest(
        lambda: client.post(path, body, content_type="application/x-www-form-urlencoded")
    )
    print(f"\n{len(body)} B form: {response.status_code} in {seconds * 1000:.1f} ms")
    assert response.status_code < 500
    assert seconds < HOSTILE_BODY_BUDGET_SECONDS


# Timed: never beside another test that keeps a core busy (tests/conftest.py).
@pytest.mark.serial
@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: multipart([("a", b"v")] * 1000), id="1000-parts-one-name"),
        pytest.param(
            lambda: multipart([(f"q{n}", b"v") for n in range(1100)]), id="1100-distinct-parts"
        ),
        pytest.param(lambda: nested_multipart(560), id="560-deep"),
        # As many parts as a hook reads, each as long as the body allows: the most
        # a body can make the parser do.
        pytest.param(
            lambda: multipart([(f"q{n}", b"v" * 250) for n in range(200)]), id="200-full-parts"
        ),
    ],
)
def test_a_hostile_multipart_body_is_answered_in_under_50_ms(build):
    _, path = hook_source("jotform")
    body, content_type = build()
    client = Client()
    seconds, response = fastest(lambda: client.post(path, body, content_type=content_type))
    print(f"\n{len(body)} B multipart: {response.status_code} in {seconds * 1000:.1f} ms")
    assert response.status_code < 500
    assert seconds < HOSTILE_BODY_BUDGET_SECONDS


def test_repeated_names_still_collect_into_a_list():
    from idempotency_core.intake.senders.parsing import parse_body

    document = parse_body(b"a=1&" * 500 + b"b=2", content_type="", parser="form")
    assert document["a"] == ["1"] * 500 and document["b"] == "2"
    body, content_type = multipart([("a", b"1")] * 3 + [("b", b"2")])
    document = parse_body(body, content_type=content_type, parser="multipart")
    assert document == {"a": ["1", "1", "1"], "b": "2"}


def test_a_jotform_delivery_still_parses_with_its_file_parts_as_names():
    sample = SAMPLES["jotform"]
    _, path = hook_source("jotform")
    assert deliver(Client(), path, sample).status_code == 200
    body, content_type = multipart([("rawRequest", b'{"q3_name": "Ada"}')])
    body = body.replace(
        b"--xyz--",
        b'--xyz\r\nContent-Disposition: form-data; name="upload"; filename="cv.pdf"\r\n'
        b"Content-Type: application/pdf\r\n\r\n%PDF-1.4\r\n--xyz--",
    )
    from idempotency_core.intake.senders.parsing import parse_body

    document = parse_body(body, content_type=content_type, parser="multipart_json")
    assert document["upload"] == "cv.pdf" and document["q3_name"] == "Ada"


# -- F5, F6: timestamps ----------------------------------------------------------------


def _hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _b64(secret: str, message: bytes) -> str:
    return base64.b64encode(hmac.new(secret.encode(), message, hashlib.sha256).digest()).decode()


def _signed_with(profile: str, timestamp: str, body: bytes, url: str) -> dict[str, str]:
    """A correct signature over `timestamp` as the sender wrote it: only the time is odd."""
    if profile in ("generic", "formspree", "googleforms"):
        header = PRESETS[profile].signature.header  # type: ignore[union-attr]
        return {header: f"t={timestamp},v1={_hex(SECRET, f'{timestamp}.'.encode() + body)}"}
    if profile == "webflow":
        return {
            "x-webflow-timestamp": timestamp,
            "x-webflow-signature": _hex(SECRET, f"{timestamp}:".encode() + body),
        }
    assert profile == "hubspot"
    return {
        "X-HubSpot-Request-Timestamp": timestamp,
        "X-HubSpot-Signature-v3": _b64(SECRET, b"POST" + url.encode() + body + timestamp.encode()),
    }


@pytest.mark.parametrize("profile", ["generic", "webflow", "hubspot", "formspree", "googleforms"])
@pytest.mark.parametrize(
    "timestamp",
    [
        "nan",
        "NaN",
        "-nan",
        "inf",
        "-Infinity",
        "1e400",
        "99999999999999999999",
        "-1",
        "0x10",
        "1_700_000_000",
        " 1700000000",
        "\u0661\u0667\u0660\u0660",
    ],
)
def test_a_signed_timestamp_that_is_no_time_is_stale(profile, timestamp):
    source, path = hook_source(profile)
    sample = SAMPLES[profile]
    url = f"http://testserver{path}"
    headers = {**dict(sample.extra_headers), **_signed_with(profile, timestamp, sample.body, url)}
    response = Client().post(path, sample.body, content_type=sample.content_type, headers=headers)
    assert response.status_code == 401, response.content
    assert not Event.objects.filter(source=source).exists()


def test_a_fresh_signed_timestamp_still_verifies():
    _, path = hook_source("generic")
    sample = SAMPLES["generic"]
    headers = {
        **dict(sample.extra_headers),
        **_signed_with("generic", str(int(time.time())), sample.body, ""),
    }
    response = Client().post(path, sample.body, content_type=sample.content_type, headers=headers)
    assert response.status_code == 200, response.content


def _with(sample: Sample, **changes: Any) -> Sample:
    document = json.loads(sample.body)
    for dotted, value in changes.items():
        target = document
        *parents, last = dotted.split("__")
        for key in parents:
            target = target[key]
        target[last] = value
    return Sample(
        sample.profile,
        json.dumps(document).encode(),
        sample.content_type,
        sample.expected,
        sign=sample.sign,
        signs_timestamp=sample.signs_timestamp,
        extra_headers=sample.extra_headers,
    )


@pytest.mark.parametrize(
    "value",
    [
        "99999999999999999",
        "9" * 40,
        "00000000000000000000001",
        "-99999999999999999",
        "9999-99-99 99:99:99",
        "nan",
        "9999-12-31T23:59:59-23:59",
        "0001-01-01T00:00:00+23:59",
        "\u0661\u0667\u0660\u0660",
    ],
)
@pytest.mark.parametrize(
    "profile, field",
    [
        ("gravityforms", "date_created"),
        ("generic", "submitted_at"),
        ("hubspot", "properties__recent_conversion_date"),
        ("formspree", "submission___date"),
    ],
)
def test_a_sender_time_that_is_no_time_is_never_a_server_error(profile, field, value):
    source, path = hook_source(profile)
    response = deliver(Client(), path, _with(SAMPLES[profile], **{field: value}))
    # Taken without the sender's time, or refused as unreadable: never a 500.
    assert response.status_code in (200, 202, 400), response.content
    assert Event.objects.filter(source=source).count() == (response.status_code != 400)


# -- F2: verification first, then the source's rate --------------------------------------


def deliver_from(client: Client, path: str, sample: Sample, address: str) -> Any:
    """The sample, rightly signed, from the client address `address`."""
    headers = signed_headers(sample, SECRET, f"http://testserver{path}")
    content_type = headers.pop("Content-Type")
    return client.post(
        path, sample.body, content_type=content_type, headers=headers, REMOTE_ADDR=address
    )


def wrong_credentials(profile: str, path: str) -> tuple[str, dict[str, str]]:
    """The path and headers of a delivery whose token or signature is wrong."""
    if SAMPLES[profile].sign is None:
        return path.rstrip("/").rsplit("/", 1)[0] + "/not-the-token/", {}
    sample = SAMPLES[profile]
    return path, {"Typeform-Signature": "sha256=" + _b64("not-the-secret", sample.body)}


@pytest.mark.parametrize("profile", ["jotform", "typeform"])
def test_the_real_sender_is_not_blocked_by_1000_wrong_credential_posts(profile):
    source, path = hook_source(profile)
    Source.objects.filter(pk=source.pk).update(rate_per_minute=20)
    sample = SAMPLES[profile]
    wrong_path, wrong_headers = wrong_credentials(profile, path)
    client = Client()
    started = time.perf_counter()
    for n in range(1000):
        refused = client.post(
            wrong_path,
            sample.body,
            content_type=sample.content_type,
            headers=wrong_headers,
            REMOTE_ADDR=f"198.51.{n // 250}.{n % 250 + 1}",  # from many places at once
        )
        assert refused.status_code == 401
    flood = time.perf_counter() - started
    print(f"\n1,000 wrong {profile} posts in {flood:.2f} s")
    real = deliver_from(client, path, sample, "203.0.113.7")
    assert real.status_code == 200, real.content
    assert Event.objects.filter(source=source).count() == 1
    # Counted, not stored one by one: one row a minute (two if the flood straddled one).
    refusals = Delivery.objects.filter(source=source, outcome="unauthorized")
    assert refusals.count() <= 2
    assert refusals.aggregate(n=Sum("receipts"))["n"] == 1000
    assert all(row.raw_body is None and row.event_id is None for row in refusals)


def test_one_address_is_limited_before_verification(settings):
    settings.ONEFOLD_HOOK_RATE_PER_ADDRESS_PER_MINUTE = 30
    _, path = hook_source("jotform")
    sample = SAMPLES["jotform"]
    wrong_path, _ = wrong_credentials("jotform", path)
    client = Client()
    for _ in range(30):
        refused = client.post(
            wrong_path, sample.body, content_type=sample.content_type, REMOTE_ADDR="198.51.100.9"
        )
        assert refused.status_code == 401
    # Over its limit, the address is answered before anything is verified or read,
    # even with the right token.
    throttled = deliver_from(client, path, sample, "198.51.100.9")
    assert throttled.status_code == 429 and int(throttled["Retry-After"]) >= 1
    assert not Event.objects.exists()
    assert deliver_from(client, path, sample, "203.0.113.7").status_code == 200


def test_the_client_address_is_read_as_the_proxy_settings_say(settings):
    settings.ONEFOLD_HOOK_RATE_PER_ADDRESS_PER_MINUTE = 5
    _, path = hook_source("jotform")
    sample = SAMPLES["jotform"]
    wrong_path, _ = wrong_credentials("jotform", path)
    client = Client()

    def throttled_after(addresses: Callable[[int], dict[str, str]]) -> int:
        cache.clear()
        for n in range(1, 12):
            answer = client.post(
                wrong_path, sample.body, content_type=sample.content_type, **addresses(n)
            )
            if answer.status_code == 429:
                return n
        return 0

    # No proxy trusted (the default): X-Forwarded-For is the client's to write, so a
    # new value per request must not make a new client.
    spoofed = throttled_after(
        lambda n: {"REMOTE_ADDR": "198.51.100.9", "HTTP_X_FORWARDED_FOR": f"192.0.2.{n}"}
    )
    assert spoofed == 6
    # One proxy in front: the address it appended is the client, whatever the client
    # wrote before it.
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    behind_proxy = throttled_after(
        lambda n: {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": f"192.0.2.{n}"}
    )
    assert behind_proxy == 0, "each client counted for itself"
    forged = throttled_after(
        lambda n: {
            "REMOTE_ADDR": "10.0.0.1",
            "HTTP_X_FORWARDED_FOR": f"192.0.2.{n}, 198.51.100.9",
        }
    )
    assert forged == 6


# -- F7: nothing tells which sources exist ------------------------------------------------


def answer_of(response: Any) -> tuple[int, bytes, dict[str, str]]:
    return response.status_code, response.content, dict(response.headers)


def test_an_unknown_source_and_every_wrong_credential_get_the_very_same_answer():
    sample = SAMPLES["typeform"]
    client = Client()

    def post(path: str, **headers: str) -> tuple[int, bytes, dict[str, str]]:
        return answer_of(
            client.post(path, sample.body, content_type="application/json", headers=headers)
        )

    typeform, typeform_path = hook_source("typeform")
    _, jotform_path = hook_source("jotform")
    disabled, disabled_path = hook_source("generic", name="disabled-site")
    Source.objects.filter(pk=disabled.pk).update(is_active=False)
    source_get_or_create(name="api-only")
    unknown = post("/hooks/nobody-here/")
    assert unknown[0] == 401
    answers = {
        "unknown, token path": post("/hooks/nobody-here/t/abcdefgh/"),
        "api profile": post("/hooks/api-only/"),
        "no signature": post(typeform_path),
        "wrong signature": post(typeform_path, **{"Typeform-Signature": "sha256=AAAA"}),
        "wrong token": post(jotform_path.rstrip("/").rsplit("/", 1)[0] + "/wrong/"),
        "no token": post(f"/hooks/{jotform_path.split('/')[2]}/"),
        "disabled, wrong signature": post(disabled_path),
    }
    for what, answer in answers.items():
        assert answer == unknown, what
    # The precise reason is kept for the console, not told to the sender.
    assert b"Typeform-Signature" not in unknown[1]
    refusals = Delivery.objects.get(source=typeform)  # both counted in one row
    assert refusals.receipts == 2
    assert refusals.verification == "the signature matches none of the configured secrets"


def test_form_js_answers_only_for_an_html_sources_own_hook():
    client = Client()
    _, html_path = hook_source("html")
    _, jotform_path = hook_source("jotform")
    served = client.get(f"{html_path}form.js")
    assert served.status_code == 200 and b"submission_id" in served.content
    refused = [
        client.get("/hooks/nobody-here/t/abcdefgh/form.js"),
        client.get(f"{jotform_path}form.js"),
        client.get(html_path.rstrip("/").rsplit("/", 1)[0] + "/wrong/form.js"),
    ]
    assert all(answer_of(r) == answer_of(refused[0]) for r in refused)
    assert refused[0].status_code == 404
    bare = [client.get("/hooks/nobody-here/form.js"), client.get("/hooks/html-site/form.js")]
    assert bare[0].status_code == bare[1].status_code == 404
    assert bare[0].content == bare[1].content


# -- F10: the public form is no spam relay ----------------------------------------------


def test_the_public_html_hook_sends_a_fourth_confirmation_to_one_address_in_a_day_to_no_one(
    sandbox, settings
):
    """Four posts of the public form to one victim's address, a spammer's text as the
    name: four enquiries and tasks, three emails that greet no one by that text, and
    the fourth held in a case, not sent."""
    settings.ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY = 3  # the product's default
    source, path = hook_source("html")
    client = Client()
    for n, address in enumerate(["victim@example.com", "Victim@Example.com"] * 2):
        body = urlencode(
            {
                "name": "Claim your prize at https://evil.example/win",
                "email": address,
                "message": f"You have won {n + 1} prizes, click the link.",
                "submission_id": f"spam-{n}",
            }
        ).encode()
        answer = client.post(path, body, content_type="application/x-www-form-urlencoded")
        assert answer.status_code == 200, answer.content
    events = list(Event.objects.filter(source=source).order_by("received_at", "pk"))
    for event in events:
        for operation in event.operations.order_by("position"):
            operation_execute(operation_id=operation.pk)
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (4, 4, 3)
    for mail in sandbox.messages():
        assert mail["body"].startswith("Hello,\n"), mail["body"][:80]
        assert "evil" not in mail["body"] and "prize" not in mail["body"]
    (held,) = ReviewCase.objects.filter(kind="confirmation_held")
    assert held.operation is not None and held.operation.status == "needs_review"
    assert "3 confirmations went to this address" in held.summary


# -- --thank-you: where a browser may be sent ---------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "//evil.example/x",
        "http://www.example.com/thanks/",
        "javascript:alert(1)",
        "https:///thanks",
        "https://www.example.com@evil.example/",
        "https://www.example.com/thanks now",
        "https://www.exam\u0440le.com/",
        "/thanks/",
        "https://www.example.com:port/",
        "ftp://www.example.com/",
    ],
)
def test_create_source_refuses_a_thank_you_url_a_browser_must_not_be_sent_to(url):
    with pytest.raises(CommandError, match="must be an absolute https:// URL"):
        call_command("create_source", "site", "--profile", "html", "--thank-you", url)
    assert not Source.objects.filter(name="site").exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://www.example.com/thanks/?from=form#top",
        "HTTPS://WWW.EXAMPLE.COM/thanks",
        "http://127.0.0.1:8000/thanks.html",
        "http://localhost/thanks",
        "http://[::1]:8080/thanks",
    ],
)
def test_create_source_takes_an_https_thank_you_url_or_http_on_this_machine(url):
    out = StringIO()
    call_command("create_source", "site", "--profile", "html", "--thank-you", url, stdout=out)
    assert Source.objects.get(name="site").thank_you_url == url


def test_a_stored_thank_you_url_that_breaks_the_rule_is_not_followed():
    source, path = hook_source("html", thank_you_url="https://www.example.com/thanks/")
    Source.objects.filter(pk=source.pk).update(thank_you_url="//evil.example/x")
    response = deliver(Client(), path, SAMPLES["html"], Accept="text/html")
    assert response.status_code == 200 and "Location" not in response
    assert Event.objects.filter(source=source).count() == 1


def test_a_stored_thank_you_url_that_breaks_the_rule_is_not_followed_for_an_unreadable_form():
    """The same rule where the post is kept as unreadable: the JSON answer, never the page."""
    source, path = hook_source("html", thank_you_url="https://www.example.com/thanks/")
    Source.objects.filter(pk=source.pk).update(thank_you_url="//evil.example/x")
    unreadable = sample_without_contact(SAMPLES["html"], everything=True)
    response = deliver(Client(), path, unreadable, Accept="text/html")
    assert response.status_code == 202 and "Location" not in response, response.content
    event = Event.objects.get(source=source)
    assert response.json() == {"event_id": str(event.pk), "status": "needs_review"}
