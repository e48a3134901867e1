"""Each provider's sample delivery, signed the way that provider signs it.

The signing here is written from each provider's recipe with `hmac` directly,
not with Onefold's verifiers, so a test proves the verifier against the recipe.
Samples come from tests/fixtures/senders/ and its providers/ folder (their
notes say where each one comes from and what was reconstructed).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import Source

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "senders"
# The providers' own published samples, as they publish them.
PROVIDERS = FIXTURES / "providers"


@dataclass(frozen=True)
class Sample:
    profile: str
    body: bytes
    content_type: str
    # name, email, message the CRM record must carry ("" where the sample has none).
    expected: tuple[str, str, str]
    # (secret, body, url, now) -> headers; None for senders authenticated by a token.
    sign: Callable[[str, bytes, str, float], dict[str, str]] | None = None
    # Seconds a signed timestamp may be off, for the "10 minutes old" check.
    signs_timestamp: bool = False
    extra_headers: tuple[tuple[str, str], ...] = ()


def _typeform_message() -> str:
    """The long-text answer of Typeform's published sample: its message."""
    document = json.loads((PROVIDERS / "typeform.json").read_text())
    return str(document["form_response"]["answers"][0]["text"])


def _b64(secret: str, message: bytes) -> str:
    return base64.b64encode(hmac.new(secret.encode(), message, hashlib.sha256).digest()).decode()


def _hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_typeform(secret: str, body: bytes, url: str, now: float) -> dict[str, str]:
    return {"Typeform-Signature": "sha256=" + _b64(secret, body)}


def sign_tally(secret: str, body: bytes, url: str, now: float) -> dict[str, str]:
    return {"Tally-Signature": _b64(secret, body)}


def sign_webflow(secret: str, body: bytes, url: str, now: float) -> dict[str, str]:
    ts = str(int(now * 1000))
    return {
        "x-webflow-timestamp": ts,
        "x-webflow-signature": _hex(secret, f"{ts}:".encode() + body),
    }


def sign_t_v1(header: str) -> Callable[[str, bytes, str, float], dict[str, str]]:
    def sign(secret: str, body: bytes, url: str, now: float) -> dict[str, str]:
        t = str(int(now))
        return {header: f"t={t},v1={_hex(secret, f'{t}.'.encode() + body)}"}

    return sign


def sign_hubspot_v3(secret: str, body: bytes, url: str, now: float) -> dict[str, str]:
    ts = str(int(now * 1000))
    return {
        "X-HubSpot-Request-Timestamp": ts,
        "X-HubSpot-Signature-v3": _b64(secret, b"POST" + url.encode() + body + ts.encode()),
    }


def _content_type_of(note: str) -> str:
    found = re.search(r"^Content-Type: (.+)$", (FIXTURES / note).read_text(), re.M)
    assert found, f"{note} names no Content-Type line"
    return found.group(1).strip()


ADA_MESSAGE = "Hello,\nI'd like a quote for 20 units (budget around €2,000).\nWe need 24/7 support."


def generic_body() -> bytes:
    return json.dumps(
        {
            "form": "contact",
            "contact": {"name": "Mary Jackson", "email": "mary@example.com"},
            "message": "Zapier sent this from a spreadsheet row.",
        }
    ).encode()


SAMPLES: dict[str, Sample] = {
    s.profile: s
    for s in (
        Sample(
            "typeform",
            (PROVIDERS / "typeform.json").read_bytes(),
            "application/json",
            (
                "Laura",
                "laura@example.com",
                _typeform_message(),
            ),
            sign=sign_typeform,
        ),
        Sample(
            "tally",
            (FIXTURES / "tally.body").read_bytes(),
            "application/json",
            (
                "Ada Lovelace",
                "ada@example.com",
                ADA_MESSAGE,
            ),
            sign=sign_tally,
        ),
        Sample(
            "webflow",
            (PROVIDERS / "webflow.json").read_bytes(),
            "application/json",
            ("Zaphod Beeblebrox", "zaphod@heartofgold.ai", ""),
            sign=sign_webflow,
            signs_timestamp=True,
        ),
        Sample(
            "jotform",
            (FIXTURES / "jotform.body").read_bytes(),
            _content_type_of("jotform.md"),
            (
                "Ada Lovelace",
                "ada@example.com",
                "Hello, I'd like a quote for 20 units. Please call me back.",
            ),
        ),
        Sample(
            "gravityforms",
            (FIXTURES / "gravityforms-contact.json").read_bytes(),
            "application/json",
            ("Grace Hopper", "grace@example.com", "Could you quote for a new office network?"),
        ),
        Sample(
            "formspree",
            (PROVIDERS / "formspree.json").read_bytes(),
            "application/json",
            (
                "Sarah Nguyen",
                "sarah@example.com",
                "I sat the GAMSAT before and need help urgently with essays before September.",
            ),
            sign=sign_t_v1("Formspree-Signature"),
            signs_timestamp=True,
        ),
        Sample(
            "hubspot",
            (FIXTURES / "hubspot-workflow.json").read_bytes(),
            "application/json",
            (
                "Katherine Johnson",
                "katherine@example.com",
                "Please call me about a maintenance contract.",
            ),
            sign=sign_hubspot_v3,
            signs_timestamp=True,
        ),
        Sample(
            "googleforms",
            (FIXTURES / "googleforms.body").read_bytes(),
            "application/json",
            (
                "Ada Lovelace",
                "ada@example.com",
                ADA_MESSAGE,
            ),
            sign=sign_t_v1("Onefold-Signature"),
            signs_timestamp=True,
        ),
        Sample(
            "cf7",
            (FIXTURES / "cf7.body").read_bytes(),
            "application/json; charset=UTF-8",
            (
                "Ada Lovelace",
                "ada@example.com",
                ADA_MESSAGE.replace("\n", "\r\n"),
            ),
        ),
        Sample(
            "wpforms",
            (FIXTURES / "wpforms.body").read_bytes(),
            "application/json; charset=utf-8",
            (
                "Ada Lovelace",
                "ada@example.com",
                ADA_MESSAGE.replace("\n", "\r\n"),
            ),
        ),
        Sample(
            "html",
            (FIXTURES / "html.body").read_bytes(),
            "application/x-www-form-urlencoded",
            (
                "Ada Lovelace",
                "ada@example.com",
                ADA_MESSAGE.replace("\n", "\r\n"),
            ),
        ),
        Sample(
            "generic",
            generic_body(),
            "application/json",
            ("Mary Jackson", "mary@example.com", "Zapier sent this from a spreadsheet row."),
            sign=sign_t_v1("Onefold-Signature"),
            signs_timestamp=True,
            extra_headers=(("Idempotency-Key", f"zap-{uuid.UUID(int=7)}"),),
        ),
    )
}


def signed_headers(sample: Sample, secret: str, url: str, *, age: float = 0.0) -> dict[str, str]:
    """Content-Type, the sample's own headers and its signature (made `age` seconds ago)."""
    headers = {"Content-Type": sample.content_type, **dict(sample.extra_headers)}
    if sample.sign is not None:
        headers.update(sample.sign(secret, sample.body, url, time.time() - age))
    return headers


# -- samples without their contact details (docs/senders.md, "Unreadable deliveries") --

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# A phone number as forms write one: digits with spaces, dots, dashes or brackets, or
# a leading "+". Plain digit strings are ids (Jotform's formID), not phones.
_PHONE = re.compile(r"^(?=.*[\s().+-])\+?[\d\s().-]{7,24}$")


def _contact_value(value: object, names: set[str], *, everything: bool) -> bool:
    """Whether `value` is a contact detail to remove: any email address; with
    `everything`, also the sample's name (or one of its words) and any phone number."""
    if not isinstance(value, str):
        return False
    if _EMAIL.match(value.strip()):
        return True
    return everything and (value.strip() in names or bool(_PHONE.match(value.strip())))


def _without(value: object, names: set[str], *, everything: bool) -> object:
    """`value` with each contact detail removed where it is written, and each object
    or list that held nothing else removed with it (HubSpot's {"value": ...}, Jotform's
    {"first", "last"}): the field is gone, as in a form that never had it."""
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        kept = []
        for key, item in items:
            if _contact_value(item, names, everything=everything):
                continue
            if everything and "phone" in str(key).lower():
                continue  # a number typed as a number (Webflow's "Phone Number": 1555…)
            stripped = _without(item, names, everything=everything)
            if isinstance(item, dict | list) and item and not stripped:
                continue
            kept.append((key, stripped))
        return dict(kept) if isinstance(value, dict) else [item for _, item in kept]
    return value


def multipart_parts(body: bytes, content_type: str) -> list[tuple[str, str]]:
    """The (name, value) fields of a multipart/form-data body of text parts."""
    boundary = content_type.split("boundary=", 1)[1].strip().encode()
    parts = []
    for chunk in body.split(b"--" + boundary)[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, value = chunk.strip(b"\r\n").partition(b"\r\n\r\n")
        found = re.search(rb'name="([^"]*)"', head)
        assert found, head
        parts.append((found.group(1).decode(), value.decode()))
    return parts


def multipart_body(parts: list[tuple[str, str]], content_type: str) -> bytes:
    """Text fields as a multipart/form-data body, as Jotform writes one (CRLF)."""
    boundary = content_type.split("boundary=", 1)[1].strip()
    lines = []
    for name, value in parts:
        lines += [f"--{boundary}", f'Content-Disposition: form-data; name="{name}"', "", value]
    return ("\r\n".join([*lines, f"--{boundary}--", ""])).encode()


def sample_without_contact(sample: Sample, *, everything: bool) -> Sample:
    """The sample with its email address removed or, with `everything`, its name and
    phone number too: nothing left to say who sent it. Written back in the sender's
    own format (JSON, a browser's form, Jotform's multipart), to be signed anew."""
    names = {sample.expected[0], *sample.expected[0].split()} - {""}
    if sample.content_type.startswith("application/x-www-form-urlencoded"):
        pairs = parse_qsl(sample.body.decode(), keep_blank_values=True)
        kept = [(k, v) for k, v in pairs if not _contact_value(v, names, everything=everything)]
        body = urlencode(kept).encode()
    elif sample.content_type.startswith("multipart/form-data"):
        parts = []
        for name, value in multipart_parts(sample.body, sample.content_type):
            if name == "rawRequest":
                value = json.dumps(_without(json.loads(value), names, everything=everything))
            elif any(_EMAIL.match(word.strip(",:")) for word in value.split()) or (
                everything and any(n in value for n in names)
            ):
                continue  # Jotform's `pretty` repeats the answers as text
            parts.append((name, value))
        body = multipart_body(parts, sample.content_type)
    else:
        stripped = _without(json.loads(sample.body), names, everything=everything)
        body = json.dumps(stripped, ensure_ascii=False).encode()
    name, _, message = sample.expected
    expected = ("" if everything else name, "", message)
    return Sample(
        sample.profile,
        body,
        sample.content_type,
        expected,
        sign=sample.sign,
        signs_timestamp=sample.signs_timestamp,
        extra_headers=sample.extra_headers,
    )


def jotform_tutoring() -> Sample:
    """The captured case (tests/fixtures/senders/README.md, `jotform-brightsparks.body`): a
    tutoring form with a `{first, last}` name widget and no email or phone field."""
    return Sample(
        "jotform",
        (FIXTURES / "jotform-brightsparks.body").read_bytes(),
        _content_type_of("jotform.md"),
        ("Ada Lovelace", "", "She needs help with GCSE algebra before the May exams."),
    )


def jotform_captured_tutoring() -> Sample:
    """A real Jotform delivery (`jotform-tutoring.body`, Zulip's capture): the tutoring
    form whose name widget is `q3_studentsName: {first, last}`, with no email, phone or
    message field. The preset reads the student's name and nothing to write to."""
    return Sample(
        "jotform",
        (FIXTURES / "jotform-tutoring.body").read_bytes(),
        _content_type_of("jotform-tutoring.md"),
        ("Niloth P", "", ""),
    )


# A map written for another Jotform form (its "Full Name", "E-mail" and "Phone"
# widgets), as a source copied from another keeps it: the tutoring form's
# `q3_studentsName` is not in it, whatever the preset reads.
ANOTHER_FORMS_MAP = {
    "field_map": {
        "name": {
            "concat": [
                {"suffix": "_fullName", "take": "first"},
                {"suffix": "_fullName", "take": "last"},
            ]
        },
        "email": {"suffix": "_email"},
        "phone": {"suffix": "_phoneNumber", "take": "full"},
        "message": {"suffix": "_message"},
    }
}
# The tutoring form's own map: the student's name, and the free text as the message.
TUTORING_MAP = {
    "field_map": {
        "name": {
            "concat": [
                {"suffix": "_studentsName", "take": "first"},
                {"suffix": "_studentsName", "take": "last"},
            ]
        },
        "email": {"suffix": "_email"},
        "phone": {"suffix": "_phoneNumber", "take": "full"},
        "message": {"suffix": "_anythingElse"},
    }
}


# -- a hooked source and a signed delivery to it (the hook tests') ----------------------

SECRET = "a-signing-secret-for-tests-of-32-or-more-characters"


def hook_source(profile: str, *, name: str = "", **options: str) -> tuple[Source, str]:
    source, _ = source_get_or_create(name=name or f"{profile}-site")
    setup = source_hook_configure(
        source=source,
        profile=profile,
        secrets=[SECRET],
        **options,  # type: ignore[arg-type]
    )
    return source, setup.path


def deliver(
    client: Any, path: str, sample: Sample, *, secret: str = SECRET, age: float = 0, **extra: str
):
    headers = signed_headers(sample, secret, f"http://testserver{path}", age=age)
    content_type = headers.pop("Content-Type")
    return client.post(path, sample.body, content_type=content_type, headers={**headers, **extra})
