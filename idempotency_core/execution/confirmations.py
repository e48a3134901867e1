"""Confirmations: the greeting they may carry, and the limits on sending them."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from idempotency_core.keys import contact_digest
from idempotency_core.models import Attempt, ConfirmationAllowance, Operation
from idempotency_core.sql import prepared_cursor
from integrations.base import Classification, DestinationError

# Longest name a greeting shows; a longer one is a message, not a name.
GREETING_NAME_MAX = 60
NEUTRAL_GREETING = "Hello,"
# Besides letters (any script, with their combining marks) and spaces: hyphens,
# apostrophes and dots ("Jean-Luc", "O'Brien", "N\u2019Dour", "J. R. R. Tolkien");
# U+2010 and U+2019 are the typographic hyphen and apostrophe.
_NAME_PUNCTUATION = frozenset("-\u2010'\u2019.")
# What HTML escaping neutralises, allowed in a configured template's values.
_MARKUP = frozenset('<>&"/')
# The ASCII characters of the two sets above, and letters (an ASCII character is never
# a combining mark): what `greeting_name` allows of an ASCII name.
_ASCII_NAME = re.compile(r"[A-Za-z \-'.]+")
_ASCII_MARKUP_NAME = re.compile(r"[A-Za-z \-'.<>&\"/]+")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
# The limits count the confirmations allowed in the last this long.
LIMIT_WINDOW = timedelta(hours=24)
# Written on a delivery's `verification` when its CAPTCHA could not be checked.
CAPTCHA_UNCHECKED = "CAPTCHA not checked"
# Attempts a person asked for: a replay, a send-again. Counted, never refused.
BY_PERSON = (Attempt.Trigger.REPLAY.value, Attempt.Trigger.REVIEWER.value)
# The decision (migrations/sql/0.2.0/confirmation_allow.sql says what it reads and
# writes): whether the operation had an allowance already, whether one was granted
# now, the counts and the CAPTCHA.
_ALLOW = (
    "SELECT * FROM onefold_confirmation_allow(%s::bigint, %s::bigint, %s::bigint, "
    "%s::uuid, %s::varchar, %s::timestamptz, %s::timestamptz, %s::integer, %s::integer, "
    "%s::text, %s::boolean)"
)


def greeting_name(name: object, *, markup: bool = False) -> str:
    """The submitted name as a greeting may show it, or "" when it may not.

    Short plain text only, nothing that reads as a link ("evil.com"; an initial such as
    "J. Smith" passes). With `markup` (autoescaped templates), `<>&"/` pass too."""
    if not isinstance(name, str):
        return ""
    # Runs of plain spaces collapse; any other space (a line break, a tab) is refused.
    shown = " ".join(part for part in name.split(" ") if part)
    if not shown or len(shown) > GREETING_NAME_MAX:
        return ""
    if shown.isascii():
        # `_name_character` (and `_MARKUP`) for each ASCII character, as one expression:
        # a Python call per character showed in the worker's profile (each confirmation
        # tests every string of the submission it shows).
        plain = (_ASCII_MARKUP_NAME if markup else _ASCII_NAME).fullmatch(shown)
        if plain is None or _ASCII_LETTER.search(shown) is None:
            return ""
    else:
        allowed = (lambda c: c in _MARKUP or _name_character(c)) if markup else _name_character
        if not all(allowed(c) for c in shown) or not any(c.isalpha() for c in shown):
            return ""
    folded = shown.casefold()
    if "www" in folded:
        return ""
    # A dot followed by two letters reads as a domain ("evil.com").
    position = folded.find(".")
    while 0 <= position < len(folded) - 2:
        if folded[position + 1 : position + 3].isalpha():
            return ""
        position = folded.find(".", position + 1)
    return shown


def _name_character(character: str) -> bool:
    if character == " " or character in _NAME_PUNCTUATION or character.isalpha():
        return True
    # A combining accent (a decomposed "é"), never a control, format or bidi mark.
    return unicodedata.category(character) in ("Mn", "Mc")


def confirmation_greeting(name: object) -> str:
    """The confirmation's first line: "Hello <name>," or, for anything else, "Hello,"."""
    shown = greeting_name(name)
    return f"Hello {shown}," if shown else NEUTRAL_GREETING


# The confirmation a form without configured content sends (configuration: none).
DEFAULT_SUBJECT = "We received your enquiry"


def confirmation_default_text(name: object) -> str:
    """The built-in text: the greeting (by the strict rule above), then the thanks. No
    reference: the CRM's record id means nothing to the customer, and nobody answering
    them looks an enquiry up by it."""
    return (
        f"{confirmation_greeting(name)}\n\n"
        "Thank you for your enquiry. We have received it and someone will be in touch.\n"
    )


# What a skipped confirmation says, on its operation and on the console's pages.
NO_ADDRESS = "not sent: no address"


# What a confirmation turned off for its form says (`confirmation.send: false`).
TURNED_OFF = "not sent: turned off for this form (confirmation.send is false)"


class ConfirmationSkippedError(DestinationError):
    """There is nobody to send the confirmation to: the submission has no email address
    (or the form's configuration turns confirmations off, `TURNED_OFF`). Nothing reached
    the mail service and no limit counted it; the step ends cancelled (perform.py,
    policy.py), its next step released as after a success."""

    skipped = True

    def __init__(self, message: str = NO_ADDRESS) -> None:
        super().__init__(message, classification=Classification.PERMANENT)


class ConfirmationHeldError(DestinationError):
    """Onefold did not send the confirmation, by its own rule: a person decides. Nothing
    reached the mail service, and the same attempt would be held again (permanent)."""

    held = True

    def __init__(self, message: str) -> None:
        super().__init__(message, classification=Classification.PERMANENT)


# Providers that deliver `first.last@` to `firstlast@`: dots are not part of the mailbox.
DOTLESS_DOMAINS = {"gmail.com": "gmail.com", "googlemail.com": "gmail.com"}


def mailbox_of(address: str) -> str:
    """The mailbox `address` reaches, for counting confirmations: the same inbox however
    written (case; a `+tag`, which most providers deliver to the untagged address; an
    internationalised domain in Unicode or Punycode; Gmail's dots). Otherwise the
    limit of a few a day to one inbox is a few a day per spelling."""
    local, at, domain = address.strip().rpartition("@")
    if not at:
        return address.strip().casefold()
    local = local.casefold().split("+", 1)[0] or local.casefold()
    domain = domain.strip().rstrip(".")
    try:
        domain = domain.encode("idna").decode("ascii").lower()
    except UnicodeError:
        domain = domain.casefold()
    if domain in DOTLESS_DOMAINS:
        local, domain = local.replace(".", ""), DOTLESS_DOMAINS[domain]
    return f"{local}@{domain}"


@dataclass(frozen=True)
class AllowanceAsk:
    """A confirmation's decision as asked of `onefold_confirmation_allow` for one
    recipient at one moment: its parameters but the operation's own (its id, source,
    event and trigger, which the statement asking it reads from the operation's row)."""

    digest: str
    limits: tuple[int, int]  # per recipient, per source
    now: datetime

    @classmethod
    def of(cls, recipient: str, *, now: datetime | None = None) -> AllowanceAsk:
        limits = (
            settings.ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY,
            settings.ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY,
        )
        return cls(contact_digest(mailbox_of(recipient)), limits, now or timezone.now())

    def lock_key(self) -> int:
        """The recipient's advisory lock: a 64-bit key derived from its contact digest."""
        hashed = hashlib.sha256(f"onefold:confirmation:recipient:{self.digest}".encode())
        return int.from_bytes(hashed.digest()[:8], "big", signed=True)

    def params(self) -> list[object]:
        """The function's parameters in its order, around the operation's four
        (`ALLOWANCE_OPERATION_AT`: id, source, event, then, last, whether a person
        asked)."""
        return [
            self.lock_key(),
            *(self.digest, self.now, self.now - LIMIT_WINDOW, *self.limits, CAPTCHA_UNCHECKED),
        ]


# Where the operation's own values go among the function's parameters.
ALLOWANCE_OPERATION_AT = 1


@dataclass(frozen=True)
class Allowance:
    """What the decision answered for an ask."""

    ask: AllowanceAsk
    earlier: bool  # the operation had an allowance already (a retry): not counted again
    granted: bool
    to_recipient: int
    from_source: int
    captcha_unchecked: bool


def confirmation_allow(
    *,
    operation: Operation,
    recipient: str,
    now: datetime | None = None,
    decided: Allowance | None = None,
) -> bool:
    """Records that this confirmation may go out now, or raises ConfirmationHeldError.
    Returns whether it was recorded now (False: an earlier attempt was allowed).

    Call before the send, outside any transaction. `onefold_confirmation_allow` takes the
    recipient's advisory lock before the statement that counts (a statement's snapshot
    predates a lock taken inside it), so decisions for one address take turns; the
    source's count is not locked. `decided`: made already by the claiming statement."""
    ask = AllowanceAsk.of(recipient, now=now)
    if decided is None or decided.ask.digest != ask.digest:
        decided = _allowance_decide(operation, ask)
    if decided.earlier or decided.granted:
        return decided.granted
    limits = decided.ask.limits
    if decided.captcha_unchecked:
        raise ConfirmationHeldError(
            "not sent: the submission's CAPTCHA could not be checked when it arrived (the "
            "provider did not answer), so nothing proves a person sent it; look at the "
            "submission, then replay to send the confirmation or close the case"
        )
    if decided.ask.digest and decided.to_recipient >= limits[0]:
        raise ConfirmationHeldError(
            f"not sent: {decided.to_recipient} confirmations went to this address in the "
            f"last 24 hours, the limit (ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY) is "
            f"{limits[0]}; a form that writes to any address is a spam relay. Replay to "
            "send it anyway, or close the case"
        )
    raise ConfirmationHeldError(
        f"not sent: this source sent {decided.from_source} confirmations in the last 24 "
        f"hours, the limit (ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY) is {limits[1]}. "
        "Replay to send it anyway, or close the case"
    )


def _allowance_decide(operation: Operation, ask: AllowanceAsk) -> Allowance:
    """The decision in a statement of its own (autocommit: committed when it returns)."""
    params = ask.params()
    params[ALLOWANCE_OPERATION_AT:ALLOWANCE_OPERATION_AT] = [
        operation.pk,
        operation.event.source_id,
        operation.event_id,
    ]
    params.append(operation.next_trigger in BY_PERSON)
    with prepared_cursor() as cursor:
        cursor.execute(_ALLOW, params)
        return Allowance(ask, *cursor.fetchone())


def confirmation_within_limits(operation: Operation, *, now: datetime | None = None) -> bool:
    """Whether a confirmation held by the sending limits would be allowed now without a
    person's say: its address and its source are under their limits again, and its
    submission's CAPTCHA was checked. Read only: the worker's decision still counts it
    under the recipient's lock when it is sent. True for a step that is no
    confirmation (nothing limits it)."""
    recipient = str((operation.content or {}).get("to") or "")
    if (operation.content or {}).get("kind") != "confirmation" or not recipient:
        return True
    ask = AllowanceAsk.of(recipient, now=now)
    since = ask.now - LIMIT_WINDOW
    counted = ConfirmationAllowance.objects.filter(granted_at__gte=since).exclude(
        operation_id=operation.pk
    )
    unchecked = operation.event.deliveries.filter(
        outcome="accepted", verification__contains=CAPTCHA_UNCHECKED
    ).exists()
    return (
        not unchecked
        and counted.filter(recipient_digest=ask.digest).count() < ask.limits[0]
        and counted.filter(source_id=operation.event.source_id).count() < ask.limits[1]
    )
