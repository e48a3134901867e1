"""Who a request is about: the events of one email address, and what they sent.

A person's events are found three ways, so that none is missed: by the contact
digest ingest stores (an HMAC of the address), by the address inside the payload
(events stored before the digest or under another normalisation), and by the address
inside a raw delivery (an unreadable submission whose map found no address).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote

from django.conf import settings
from django.db import connection
from django.db.models import Q

from idempotency_core.keys import contact_digest
from idempotency_core.models import AuditEntry, Delivery, Event
from idempotency_core.privacy.scrub import SEARCHABLE_LENGTH, Scrubber

ERASED_ACTION = "person_erased"
EXPORTED_ACTION = "person_exported"


def address_normalised(address: str) -> str:
    return address.strip().lower()


def person_digest(address: str) -> str:
    """The keyed digest the audit trail keeps of an address instead of the address:
    anyone holding the address (and the key) can find the entries again; nobody can
    read the address from them. Its key differs from the contact digest's, so the
    audit's digest matches no event."""
    key = hashlib.sha256(f"onefold-person-request:{settings.SECRET_KEY}".encode()).digest()
    return hmac.new(key, address_normalised(address).encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Person:
    address: str
    digest: str
    event_ids: tuple[Any, ...]
    # What they sent (address, name, phone, message, form fields): looked for everywhere.
    values: tuple[str, ...]
    # What else their raw deliveries hold (a provider's own strings among the person's)
    # and the name's parts: erased only in rows that are theirs.
    own_values: tuple[str, ...]
    words: tuple[str, ...]

    @property
    def scrubber(self) -> Scrubber:
        """For the person's own rows: every value, and the name's parts as words."""
        return Scrubber(self.values + self.own_values, self.words)

    @property
    def anywhere(self) -> Scrubber:
        """For everyone's rows: what they sent, by values long enough to be theirs."""
        return Scrubber(v for v in self.values if len(v) >= SEARCHABLE_LENGTH)


_RAW_MATCH = """
SELECT DISTINCT event_id FROM idempotency_core_delivery
WHERE raw_body IS NOT NULL AND event_id IS NOT NULL
  AND (strpos(lower(encode(raw_body, 'escape')), %s) > 0
       OR strpos(lower(encode(raw_body, 'escape')), %s) > 0)
"""


def person_events(address: str) -> Q:
    """The condition on Event that selects the person's events."""
    normalised = address_normalised(address)
    if not normalised:
        return Q(pk__in=[])
    with connection.cursor() as cursor:
        cursor.execute(_RAW_MATCH, [normalised, quote(normalised, safe="").lower()])
        from_raw = [row[0] for row in cursor.fetchall()]
    return (
        Q(contact_digest=contact_digest(normalised))
        | Q(payload__contact__email__iexact=normalised)
        | Q(pk__in=from_raw)
    )


def erased_event_ids(digest: str) -> list[Any]:
    """Events an earlier erasure of the same address named (their data is gone, their
    CRM records may not be: `erase --crm` after a plain erase still finds them)."""
    ids: list[Any] = []
    for details in AuditEntry.objects.filter(
        action=ERASED_ACTION, details__digest=digest
    ).values_list("details", flat=True):
        ids += list((details or {}).get("events") or [])
    return ids


def person_find(address: str, *, with_erased: bool = False) -> Person:
    normalised = address_normalised(address)
    digest = person_digest(normalised)
    condition = person_events(normalised)
    if with_erased:
        condition |= Q(pk__in=erased_event_ids(digest))
    events = list(Event.objects.filter(condition).order_by("received_at"))
    values: set[str] = {normalised} if normalised else set()
    words: set[str] = set()
    for event in events:
        sent = _values_sent(event.payload)
        values |= sent
        name = str(((event.payload or {}).get("contact") or {}).get("name") or "")
        words |= {part for part in name.split() if len(part) >= 2}
    raw: set[str] = set()
    deliveries = Delivery.objects.filter(event__in=[e.pk for e in events], raw_body__isnull=False)
    for body in deliveries.values_list("raw_body", flat=True):
        raw |= _values_sent(_raw_document(bytes(body or b"")))
    return Person(
        address=normalised,
        digest=digest,
        event_ids=tuple(e.pk for e in events),
        values=tuple(sorted(v for v in values if len(v) >= 3)),
        own_values=tuple(sorted(v for v in raw - values if len(v) >= 3)),
        words=tuple(sorted(words)),
    )


def _values_sent(document: Any) -> set[str]:
    """Every string the sender put in a payload or a raw body, keys aside: the contact,
    the message and each form field (however nested)."""
    return {value.strip() for value in _leaves(document) if value.strip()}


def _leaves(document: Any) -> Iterator[str]:
    if isinstance(document, str):
        yield document
    elif isinstance(document, bool) or document is None:
        return
    elif isinstance(document, int | float):
        yield str(document)
    elif isinstance(document, list):
        for item in document:
            yield from _leaves(item)
    elif isinstance(document, dict):
        for key, value in document.items():
            if key not in _NOT_SENT:
                yield from _leaves(value)


# Keys of a payload that Onefold or the form itself wrote, not the person.
_NOT_SENT = frozenset({"form", "submitted_at", "submission_id", "revises"})


def _raw_document(body: bytes) -> Any:
    """A raw delivery read as JSON, else as a form's fields."""
    text = body.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return [value for _, value in parse_qsl(text, keep_blank_values=False)]
