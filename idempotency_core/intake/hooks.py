"""Hooks: a provider's own delivery becomes an event, under the API's guarantees."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast

from django.conf import settings
from django.core.cache import cache
from django.db.models import F
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import ValidationError

from idempotency_core.intake.api.serializers import KEY_REGEX, submission_validated
from idempotency_core.intake.ingest import (
    IngestResult,
    KeyReusedError,
    RawDelivery,
    Unreadable,
    delivery_refused,
    event_ingest,
    event_ingest_unreadable,
)
from idempotency_core.intake.rate import WINDOW_SECONDS, source_rate_wait
from idempotency_core.intake.senders.captcha import TOKEN_FIELDS, CaptchaVerdict, captcha_check
from idempotency_core.intake.senders.mapping import (
    Mapped,
    MappingError,
    document_map,
    evaluate,
    field_map_data,
    text,
)
from idempotency_core.intake.senders.parsing import MalformedDeliveryError, parse_body
from idempotency_core.intake.senders.profiles import Profile, profile_resolve
from idempotency_core.intake.senders.verifying import (
    SignedRequest,
    Verification,
    signature_verify,
    token_verify,
)
from idempotency_core.intake.sources import InvalidProfileError, thank_you_url_check
from idempotency_core.keys import canonical_json, payload_fingerprint
from idempotency_core.models import BodyDigest, Delivery, Event, Source

DISABLED_RETRY_AFTER_SECONDS = 300
CAPTCHA_FAILED_PAGE = "intake/captcha_failed.html"
UNVERIFIED = {
    "code": "unauthorized",
    "detail": "The delivery could not be verified: no such hook, or a wrong or missing "
    "signature or token.",
}


@dataclass(frozen=True)
class HookRequest:
    """What the view read off the HTTP request; nothing of Django's request leaks in."""

    body: bytes
    content_type: str
    headers: Mapping[str, str]  # case-insensitive (Django's request.headers)
    method: str
    url: str
    path_token: str = ""
    wants_html: bool = False
    # The client's address as this server sees it (a proxy's, behind one).
    client_address: str = ""


@dataclass(frozen=True)
class HookAnswer:
    status: int
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    # The html profile's browser answer: 303 to this URL.
    redirect_to: str = ""
    # Or a page (a template, `body` its context): the CAPTCHA failed.
    page: str = ""


# The key of a delivery without a sender id: a fingerprint of the delivery itself.
FINGERPRINT_PREFIX = "fp:"


def hook_refused() -> HookAnswer:
    """The one answer to a delivery that did not verify, and to one for a source that
    does not exist or has no hook: the same status and body, so that no one learns
    which sources exist or which provider one uses. Why it was refused is on the
    console's source page (the refusal's row), never in the answer."""
    return HookAnswer(401, dict(UNVERIFIED))


def hook_receive(*, source: Source, request: HookRequest) -> HookAnswer:
    """Verifies, maps and ingests one delivery; the answer the sender should get.

    The credential is checked before anything else about the source is told: a
    disabled source answers 503 and an exhausted rate 429 only to its own sender."""
    profile = profile_resolve(source.profile, source.profile_overrides)
    verification = _authenticate(source, profile, request)
    if not verification.ok:
        refusal_count(source=source, detail=verification.detail)
        return hook_refused()
    if not source.is_active:
        delivery_refused(source=source, outcome=Delivery.Outcome.DISABLED, status_code=503)
        return HookAnswer(
            503,
            {"code": "source_disabled", "detail": "This source is disabled; retry later."},
            {"Retry-After": str(DISABLED_RETRY_AFTER_SECONDS)},
        )
    wait = source_rate_wait(source)
    if wait is not None:
        return HookAnswer(
            429,
            {"code": "throttled", "detail": "Too many deliveries; retry later."},
            {"Retry-After": str(max(1, round(wait)))},
        )
    if len(request.body) > settings.ONEFOLD_MAX_BODY_BYTES:
        delivery_refused(source=source, outcome=Delivery.Outcome.TOO_LARGE, status_code=413)
        return HookAnswer(413, {"code": "body_too_large", "detail": "The body is too large."})
    try:
        document = parse_body(
            request.body,
            content_type=request.content_type,
            parser=profile.parser,
            json_field=profile.json_field,
        )
    except MalformedDeliveryError as exc:
        return _malformed(source, str(exc))
    if profile.honeypot and text(document.get(profile.honeypot)):
        # A bot filled the field no person sees: answered like a success, not kept.
        delivery_refused(source=source, outcome=Delivery.Outcome.HONEYPOT, status_code=200)
        return _accepted(source, profile, request, event_id="")
    if _captcha_required(source, profile, document, request):
        captcha = captcha_check(
            provider_name=source.captcha_provider,
            secret=source.captcha_secret,
            document=document,
            client_address=request.client_address,
        )
        if captcha.refused:
            return _captcha_refused(source, profile, request, captcha)
        verification = replace(verification, detail=f"{verification.detail}; {captcha.detail}")
    return _ingest(source, profile, request, document, verification)


def _captcha_required(
    source: Source, profile: Profile, document: Mapping[str, Any], request: HookRequest
) -> bool:
    """A source with a CAPTCHA needs a good token for a new event. An exact repeat of a
    stored one (the browser's re-post, whose single-use token the provider now refuses)
    creates nothing, so it is answered as the repeat it is."""
    if not source.captcha_provider:
        return False
    key, payload, errors = submission_from(source, profile, document, request.headers)
    known = Event.objects.filter(source=source, key=key)
    if not key.startswith(FINGERPRINT_PREFIX):
        # The sender's id: its content must match too, or this is another submission.
        if errors:
            return True
        known = known.filter(fingerprint=payload_fingerprint(payload))
    return not known.exists()


def _captcha_refused(
    source: Source, profile: Profile, request: HookRequest, captcha: CaptchaVerdict
) -> HookAnswer:
    """Nothing kept but a content-free row; the sender is told why. 400, not 401: the
    hook's credential was good (401 stays the one answer for a wrong or unknown one)
    and the sender must change the request (a fresh token) before sending it again."""
    delivery_refused(
        source=source,
        outcome=Delivery.Outcome.CAPTCHA_FAILED,
        status_code=400,
        detail=captcha.detail,
    )
    body = {
        "code": "captcha_failed",
        "detail": f"The CAPTCHA check failed: {captcha.detail}. Nothing was kept; "
        "solve the CAPTCHA again and resend.",
    }
    browser = profile.answer == "html" and request.wants_html
    return HookAnswer(400, body, page=CAPTCHA_FAILED_PAGE if browser else "")


def submission_from(
    source: Source, profile: Profile, document: Mapping[str, Any], headers: Mapping[str, str]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(event key, submission payload, field errors): what `remap` re-runs too. With
    errors, the payload is what the map found. The key is the delivery's own
    (`_event_key`) in every state: it never depends on the map, so a delivery kept as
    unreadable and the same delivery read by a corrected map are one event."""
    key = _delivery_key(profile, document, headers)
    try:
        mapped = document_map(profile.field_map, document)
    except MappingError as exc:
        # The source's map is broken, not the delivery: kept all the same, for a fixed map.
        mapped = Mapped(name="", email="", phone="", message="", submitted_at="", form="")
        errors: dict[str, Any] = {"field_map": [f"The source's field map cannot be applied: {exc}"]}
    else:
        errors = {}
    payload = _payload(source, profile, mapped)
    if errors:
        return key, payload, errors
    try:
        submission_validated(payload, from_sender=True)
    except ValidationError as exc:
        # A serializer's refusal is always by field (DRF's as_serializer_error).
        return key, payload, dict(cast(dict[str, Any], exc.detail))
    return key, payload, {}


def _delivery_key(profile: Profile, document: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """The sender's own id; else a fingerprint of the delivery as sent (its CAPTCHA
    token aside, which a browser's re-post renews)."""
    content = {k: v for k, v in document.items() if k not in TOKEN_FIELDS}
    return _event_key(profile, document, headers, {"document": content})


def mapped_key_before_020(
    profile: Profile, document: Mapping[str, Any], payload: dict[str, Any]
) -> str:
    """The key a readable delivery without a sender id had before 0.2.0: a fingerprint
    of what the map made of it. Such events are still in databases that upgraded, and a
    repeat of their delivery must find them."""
    return _event_key(profile, document, {}, {"payload": payload})


def _ingest(
    source: Source,
    profile: Profile,
    request: HookRequest,
    document: dict[str, Any],
    verification: Verification,
) -> HookAnswer:
    key, payload, errors = submission_from(source, profile, document, request.headers)
    raw = RawDelivery(
        body=_redacted(request.body, request.path_token),
        content_type=request.content_type,
        verification=verification.detail,
    )
    if key.startswith(FINGERPRINT_PREFIX):
        earlier = None if errors else mapped_key_before_020(profile, document, payload)
        key = _known_key(source, key, earlier, body=raw.body)
    try:
        if errors:
            return _unreadable(source, profile, request, key, payload, errors, raw)
        result = event_ingest(
            source=source,
            key=key,
            payload=payload,
            submitted_at=parse_datetime(payload.get("submitted_at", "")),
            raw=raw,
        )
    except KeyReusedError as exc:
        return HookAnswer(
            422,
            {
                "code": "idempotency_key_reused",
                "detail": "This submission id was delivered before with other content.",
                "event_id": str(exc.event.pk),
            },
        )
    return _accepted(source, profile, request, event_id=str(result.event.pk))


def _known_key(source: Source, key: str, earlier: str | None, *, body: bytes) -> str:
    """`key`, unless only another key names an event made from this same delivery: the
    key it had before 0.2.0 (`earlier`, what today's map makes of it), else the key of
    an event kept from these very bytes (`event_kept_from`), whatever map read them then.
    Its repeat is then recognised, never made a second submission. For senders without
    an id only: one read, and a second for a delivery neither key names (a new one)."""
    keys = (key,) if earlier is None else (key, earlier)
    found = set(Event.objects.filter(source=source, key__in=keys).values_list("key", flat=True))
    if key in found:
        return key
    if earlier in found:
        return earlier
    kept = event_kept_from(source.pk, body)
    return kept.key if kept is not None else key


def event_kept_from(
    source_id: int, body: bytes, *, other_than: Event | None = None, planned: bool = False
) -> Event | None:
    """The source's earliest event with a kept delivery of exactly these bytes, under a
    fingerprint key (a sender's own id already makes one event of its deliveries), but
    `other_than`; with `planned`, only one that has its operations. Found by the bytes,
    not by a key: the key of a delivery without an id was once a fingerprint of what
    the map made of it (before 0.2.0), and what a map makes of a delivery changes with
    the map, but a delivery sent again is the same bytes."""
    matches = (
        Delivery.objects.alias(digest=BodyDigest("raw_body"))
        # The terms of `delivery_source_body_idx`, which finds them.
        .filter(
            source_id=source_id,
            digest=hashlib.sha256(body).digest(),
            raw_body__isnull=False,
            payload_matched=True,
            event__key__startswith=FINGERPRINT_PREFIX,
        )
    )
    if other_than is not None:
        matches = matches.exclude(event_id=other_than.pk)
    if planned:
        matches = matches.filter(event__operations__isnull=False)
    first = matches.order_by("received_at", "pk").select_related("event").first()
    return first.event if first is not None else None


def _unreadable(
    source: Source,
    profile: Profile,
    request: HookRequest,
    key: str,
    payload: dict[str, Any],
    errors: dict[str, Any],
    raw: RawDelivery,
) -> HookAnswer:
    """Kept, not refused: the sender proved itself and the body parsed, so its content is
    Onefold's to keep (Jotform, for one, never sends a refused delivery again). 202 and
    `needs_review` on first receipt; a repeat is answered as any repeat."""
    stored = storable(payload)
    # The thank-you page by the same rule as an accepted post's (`_safe_page`).
    browser = profile.answer == "html" and request.wants_html and _safe_page(source.thank_you_url)
    result: IngestResult = event_ingest_unreadable(
        source=source,
        key=key,
        payload=stored,
        raw=raw,
        unreadable=Unreadable(
            missing=missing_lines(errors),
            profile=profile.name,
            field_map=field_map_data(profile.field_map),
        ),
        submitted_at=_moment(stored.get("submitted_at")),
        status_code=303 if browser else 202,
    )
    if not result.created:
        return _accepted(source, profile, request, event_id=str(result.event.pk))
    if browser:
        # The visitor's part is done: what they sent is kept, and a person reads it.
        return HookAnswer(303, redirect_to=source.thank_you_url)
    return HookAnswer(202, {"event_id": str(result.event.pk), "status": "needs_review"})


def missing_lines(errors: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Field errors as "contact.email: Enter a valid email address." lines: names and
    rules only (the serializer's messages quote no value)."""
    lines: list[str] = []
    for name, problem in errors.items():
        where = prefix if name == "non_field_errors" else f"{prefix}{'.' if prefix else ''}{name}"
        if isinstance(problem, Mapping):
            lines += missing_lines(problem, where)
        else:
            messages = problem if isinstance(problem, list) else [problem]
            lines += [f"{where or 'submission'}: {message}" for message in messages]
    return lines


def storable(value: Any) -> Any:
    """`value` with NUL characters replaced: PostgreSQL's jsonb cannot hold them, and a
    payload that was not validated may carry them (a form field's `%00`)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [storable(item) for item in value]
    if isinstance(value, dict):
        return {storable(str(k)): storable(v) for k, v in value.items()}
    return value


def _moment(value: object) -> datetime | None:
    try:
        return parse_datetime(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _authenticate(source: Source, profile: Profile, request: HookRequest) -> Verification:
    if profile.signature is not None:
        signed = SignedRequest(
            body=request.body,
            headers=request.headers,
            method=request.method,
            url=profile.public_url or request.url,
            now=time.time(),
        )
        secrets = list(source.secrets.order_by("-created_at").values_list("secret", flat=True))
        return signature_verify(profile.signature, signed, secrets)
    presented = request.headers.get(profile.token_header, "") if profile.token_header else ""
    return token_verify(presented or request.path_token, digest=source.hook_token_digest)


def refusal_count(*, source: Source, detail: str, now: float | None = None) -> None:
    """Counts a failed verification into the source's refusal row of this minute (the
    latest reason kept), creating it for the first one: a flood of wrong credentials
    writes one row a minute, not one per post. A process finds the row through the
    cache: with the default local-memory cache each web process keeps its own row of
    the minute (with CACHE_URL, all share one); the rows' `receipts` add up to every
    refusal either way."""
    moment = time.time() if now is None else now
    key = f"hook-refusals:{source.pk}:{int(moment // WINDOW_SECONDS)}"
    row_id = cache.get(key)
    if row_id is not None:
        counted = Delivery.objects.filter(pk=row_id).update(
            receipts=F("receipts") + 1, verification=detail[:200]
        )
        if counted:
            return
    row = delivery_refused(
        source=source, outcome=Delivery.Outcome.UNAUTHORIZED, status_code=401, detail=detail
    )
    cache.set(key, row.pk, timeout=WINDOW_SECONDS + 5)


def _payload(source: Source, profile: Profile, mapped: Mapped) -> dict[str, Any]:
    """The submission in the JSON API's shape, so it reaches the CRM exactly as one; a
    contact detail the delivery does not have is left out, not sent blank."""
    contact = {
        name: value
        for name, value in (("name", mapped.name), ("email", mapped.email), ("phone", mapped.phone))
        if value
    }
    payload: dict[str, Any] = {
        "form": (mapped.form or source.default_form or profile.name)[:100],
        "contact": contact,
        "message": mapped.message,
    }
    if mapped.fields:
        payload["fields"] = mapped.fields
    submitted_at = _when(mapped.submitted_at)
    if submitted_at:
        payload["submitted_at"] = submitted_at
    return payload


def _when(value: str) -> str:
    """The sender's submission time as ISO 8601, or "" when it gives none we can read
    (HubSpot writes epoch milliseconds; most write ISO 8601). A time that is no time
    (an all-digit overflow, year 99999) is left out like any other unreadable one: the
    submission is still taken, without the sender's time."""
    if not value:
        return ""
    if value.isascii() and value.isdigit():
        # Beyond 20 digits it is no time in any unit (and int() of a long one is slow).
        if len(value) > 20:
            return ""
        seconds = int(value) / 1000 if len(value) > 11 else int(value)
        try:
            return datetime.fromtimestamp(seconds, tz=UTC).isoformat()
        except (OverflowError, OSError, ValueError):  # past year 9999, or the C library's range
            return ""
    try:
        parsed = parse_datetime(value)
    except ValueError:
        return ""
    if parsed is None:
        return ""
    # A sender that writes no offset writes UTC (Gravity Forms' date_created is UTC).
    aware = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    try:
        aware.astimezone(UTC)  # 9999-12-31T23:59-23:59 is no instant a database can store
    except OverflowError:
        return ""
    return aware.isoformat()


def _event_key(
    profile: Profile,
    document: Mapping[str, Any],
    headers: Mapping[str, str],
    content: dict[str, Any],
) -> str:
    """The sender's own id, namespaced by profile and form; else a fingerprint of
    `content` (with the sender's own timestamp, so a genuine resubmission is another
    event)."""
    form_id = text(evaluate(profile.form_id, document)) if profile.form_id else ""
    for place in profile.id_places:
        if isinstance(place, str) and place.startswith("header:"):
            value = headers.get(place.removeprefix("header:"), "")
        else:
            value = text(evaluate(place, document))
        if value:
            return _bounded(f"{profile.name}:{form_id or '-'}:{value}")
    stamp = text(evaluate(profile.sender_timestamp, document)) if profile.sender_timestamp else ""
    fingerprinted = canonical_json({**content, "sender_timestamp": stamp}).encode(
        "utf-8", "surrogatepass"
    )
    return f"{FINGERPRINT_PREFIX}{hashlib.sha256(fingerprinted).hexdigest()}"


def _redacted(body: bytes, token: str) -> bytes:
    """The body to keep: some senders echo the hook's URL (Jotform's `webhookURL`), and
    the token in it is a credential, never kept."""
    return body.replace(token.encode(), b"[token]") if token else body


def _bounded(key: str) -> str:
    """Keys longer than 255 or outside visible ASCII are replaced by their digest."""
    if KEY_REGEX.fullmatch(key):  # the API's own key rule
        return key
    return f"id:{hashlib.sha256(key.encode()).hexdigest()}"


def _accepted(
    source: Source, profile: Profile, request: HookRequest, *, event_id: str
) -> HookAnswer:
    if profile.answer == "html" and request.wants_html and _safe_page(source.thank_you_url):
        return HookAnswer(303, redirect_to=source.thank_you_url)
    return HookAnswer(200, {"event_id": event_id} if event_id else {"status": "ok"})


def _safe_page(url: str) -> bool:
    """Whether a browser may be sent to `url`: a value stored before the rule of
    `thank_you_url_check` (say `//evil.example/x`) is not followed, the JSON answer is
    given instead."""
    try:
        return bool(thank_you_url_check(url))
    except InvalidProfileError:
        return False


def _malformed(source: Source, detail: str, errors: dict[str, Any] | None = None) -> HookAnswer:
    delivery_refused(source=source, outcome=Delivery.Outcome.INVALID, status_code=400)
    body: dict[str, Any] = {"code": "invalid", "detail": detail}
    if errors:
        body["errors"] = errors
    return HookAnswer(400, body)
