"""Who a request is about: the events of one email address, and what they sent.

An event is a person's by its own contact: the contact digest ingest stores (an HMAC
of the address), or the address in its payload (events stored before the digest or
under another normalisation). Only an event whose contact could not be read (an
unreadable submission, kept for a corrected map) is looked for in its raw deliveries,
and there only by the whole address (an@example.org never finds joan@example.org).

A delivery refused because its key names another submission (`key_reused`) is kept
on that submission's event, but it is its own sender's: it never makes the event
anyone else's, and it is the person's whose contact digest ingest kept on it (their
address as the map read it), else, where no map read one, whose whole address it holds.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote

from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet

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
    # Deliveries they sent that were refused because another submission has the key:
    # the bodies are theirs, the events they are kept on are not.
    refused_ids: tuple[Any, ...] = ()

    @property
    def found(self) -> bool:
        return bool(self.event_ids or self.refused_ids)

    @property
    def scrubber(self) -> Scrubber:
        """For the person's own rows: every value, and the name's parts as words."""
        return Scrubber(self.values + self.own_values, self.words)

    @property
    def anywhere(self) -> Scrubber:
        """For everyone's rows: what they sent, by values long enough to be theirs."""
        return Scrubber(v for v in self.values if len(v) >= SEARCHABLE_LENGTH)


# A first sieve by substring, in the database; `names_address` then decides.
_RAW_SIEVE = """
strpos(lower(encode(d.raw_body, 'escape')), %s) > 0
OR strpos(lower(encode(d.raw_body, 'escape')), %s) > 0
"""

# Raw deliveries of events with no contact of their own (a refused one aside).
_UNREADABLE_NAMING = f"""
SELECT d.event_id, d.raw_body FROM idempotency_core_delivery d
JOIN idempotency_core_event e ON e.id = d.event_id
WHERE d.raw_body IS NOT NULL AND d.outcome <> %s
  AND e.contact_digest = '' AND coalesce(e.payload #>> '{{contact,email}}', '') = ''
  AND ({_RAW_SIEVE})
"""

_REFUSED_NAMING = f"""
SELECT d.id FROM idempotency_core_delivery d
WHERE d.raw_body IS NOT NULL AND d.outcome = %s AND ({_RAW_SIEVE})
"""


def person_events(address: str) -> Q:
    """The condition on Event that selects the person's events."""
    normalised = address_normalised(address)
    if not normalised:
        return Q(pk__in=[])
    return (
        Q(contact_digest=contact_digest(normalised))
        | Q(payload__contact__email__iexact=normalised)
        | Q(pk__in=_unreadable_events(normalised))
    )


def _sieve(address: str) -> list[str]:
    return [address, quote(address, safe="").lower()]


def _unreadable_events(address: str) -> list[Any]:
    """Events whose contact could not be read, one of whose own raw deliveries names
    the address."""
    with connection.cursor() as cursor:
        cursor.execute(_UNREADABLE_NAMING, [Delivery.Outcome.KEY_REUSED, *_sieve(address)])
        rows = cursor.fetchall()
    return list({event_id for event_id, body in rows if names_address(bytes(body), address)})


def _refused_deliveries(address: str) -> list[Delivery]:
    """Refused repeats the person sent under another submission's key: by the sender's
    contact digest ingest keeps on each, or, for one whose sender no map could read (or
    kept before that digest was), by the whole address in its body."""
    with connection.cursor() as cursor:
        cursor.execute(_REFUSED_NAMING, [Delivery.Outcome.KEY_REUSED, *_sieve(address)])
        ids = [row[0] for row in cursor.fetchall()]
    digest = contact_digest(address)
    by_body = [
        delivery
        for delivery in Delivery.objects.filter(pk__in=ids, sender_digest="")
        if names_address(bytes(delivery.raw_body or b""), address)
    ]
    by_sender = Delivery.objects.filter(
        outcome=Delivery.Outcome.KEY_REUSED, sender_digest=digest, raw_body__isnull=False
    )
    return sorted({*by_body, *by_sender}, key=lambda delivery: delivery.pk)


def names_address(body: bytes, address: str) -> bool:
    """The body holds `address` as a whole address, case aside: not inside a longer
    one (an@example.org in joan@example.org, or in an@example.org.uk). Read as it is
    written and as its fields, so that a form's %40 or JSON's escapes are undone."""
    pattern = re.compile(
        rf"(?<![\w.!#$%&'*+/=?^`{{|}}~-]){re.escape(address)}(?![\w-]|\.[\w-])",
        re.IGNORECASE,
    )
    texts = [body.decode("utf-8", errors="replace"), *_leaves(_raw_document(body))]
    return any(pattern.search(text) for text in texts)


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
    refused = _refused_deliveries(normalised) if normalised else []
    values: set[str] = {normalised} if normalised else set()
    words: set[str] = set()
    for payload in [event.payload for event in events]:
        values |= _values_sent(payload)
        name = str(((payload or {}).get("contact") or {}).get("name") or "")
        words |= {part for part in name.split() if len(part) >= 2}
    raw: set[str] = set()
    bodies = [bytes(d.raw_body) for d in refused if d.raw_body is not None]
    # Their events' deliveries, but not a refused one another person sent.
    bodies += [
        bytes(body or b"")
        for body in person_deliveries(tuple(e.pk for e in events), tuple(d.pk for d in refused))
        .filter(raw_body__isnull=False)
        .values_list("raw_body", flat=True)
    ]
    for body in bodies:
        raw |= _values_sent(_raw_document(body))
    return Person(
        address=normalised,
        digest=digest,
        event_ids=tuple(e.pk for e in events),
        values=tuple(sorted(v for v in values if len(v) >= 3)),
        own_values=tuple(sorted(v for v in raw - values if len(v) >= 3)),
        words=tuple(sorted(words)),
        refused_ids=tuple(d.pk for d in refused),
    )


def person_deliveries(
    event_ids: tuple[Any, ...], refused_ids: tuple[Any, ...]
) -> QuerySet[Delivery]:
    """The deliveries of the person's events that are theirs (a refused repeat is its
    sender's), and their own refused ones kept on other events."""
    return Delivery.objects.filter(
        (Q(event_id__in=event_ids) & ~Q(outcome=Delivery.Outcome.KEY_REUSED))
        | Q(pk__in=refused_ids)
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
