"""What an adapter call comes to: an `Effect` (the destination holds the effect, and
here is its reference), or a `DestinationError` classified as one of:

- RETRYABLE: certainly not applied (connection refused before sending, 429, 503);
- PERMANENT: refused and will be refused again (400, 401, 403, 404, 422);
- AMBIGUOUS: may have been applied (timeout after sending, connection dropped
  before the answer, 500).

The engine decides what to do with each class; adapters only classify (an HTTP
status by the one rule in `integrations.http`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import StrEnum

from integrations.limits import RateLimit


class Classification(StrEnum):
    RETRYABLE = "retryable"
    PERMANENT = "permanent"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class Reply:
    """A destination's answer code, named by the protocol that gave it: an HTTP
    status and an SMTP reply code are different things (SMTP 250 is success)."""

    protocol: str  # "http" or "smtp"
    code: int

    def __str__(self) -> str:
        return f"{self.protocol.upper()} {self.code}"


def http_reply(code: int | None) -> Reply | None:
    return Reply("http", code) if code is not None else None


def smtp_reply(code: int | None) -> Reply | None:
    return Reply("smtp", code) if code is not None else None


@dataclass(frozen=True)
class Effect:
    """The destination holds the effect; `ref` names it there."""

    ref: str
    reply: Reply | None = None
    # True when the effect already existed (409 on a unique reference, or found
    # by lookup) and was adopted rather than created by this call.
    adopted: bool = False

    @classmethod
    def deletion(cls, ref: str, status_code: int) -> Effect:
        """A DELETE's effect: a 404 is the deletion already made (a repeat after a lost
        answer), adopted."""
        return cls(ref=ref, reply=http_reply(status_code), adopted=status_code == 404)


class DestinationError(Exception):
    def __init__(
        self,
        message: str,
        *,
        classification: Classification,
        reply: Reply | None = None,
        retry_after: float | None = None,
        matches: tuple[str, ...] = (),
        create_anyway: bool = False,
        rate_limit: RateLimit = RateLimit.NONE,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.classification = classification
        self.reply = reply
        self.retry_after = retry_after
        # A rate limit refused it (nothing applied): asked again after `retry_after`,
        # never counted as a failed attempt.
        self.rate_limit = rate_limit
        # The records the destination says this create would duplicate (a CRM's
        # duplicate rule), and whether it would accept the create if told to allow a
        # duplicate (the rule only alerts). A person decides: link, or create anyway.
        self.matches = matches
        self.create_anyway = create_anyway


@contextmanager
def unclear_is_retryable(worded: Callable[[str], str]) -> Iterator[None]:
    """What an adapter does before the write that counts: an AMBIGUOUS failure in it left
    that write unsent, so it is RETRYABLE, its message as `worded` puts it."""
    try:
        yield
    except DestinationError as exc:
        if exc.classification != Classification.AMBIGUOUS:
            raise
        raise DestinationError(
            worded(exc.message), classification=Classification.RETRYABLE, reply=exc.reply
        ) from exc


def read_before_write(what: str) -> AbstractContextManager[None]:
    """A read an adapter makes before its write (the owners, a schema): a lost answer to
    it changed nothing, so it is RETRYABLE, never AMBIGUOUS (which would send the
    engine looking for an effect that cannot exist)."""
    return unclear_is_retryable(lambda message: f"{what}: {message} (nothing was written)")


def unknown_property_error(names: list[str], where: str) -> DestinationError:
    """Configured properties the CRM's schema does not have: nothing is sent."""
    return DestinationError(
        f"no property {', '.join(repr(n) for n in names)} in {where}; correct the "
        "configuration's fields (manage.py config apply), then replay",
        classification=Classification.PERMANENT,
    )
