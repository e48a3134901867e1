"""What a case's notification says, by email or webhook, and the webhook's send.

Each names the case's kind in the console's words (`KIND_WORDS`, filled by the
console's app from its glossary, since the core never imports the console), the
source and the form, how long the case has waited, and links to it at
ONEFOLD_CONSOLE_URL + /console/cases/<id>/. Nothing else of the case: its summary and
evidence can quote a destination's words, and the event holds the customer's contact
details, so neither is read here. A notice carries no customer's email address, phone
number or name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

import httpx
from django.conf import settings
from django.core.mail import EmailMessage
from django.utils import timezone

from idempotency_core.configuration.review_block import webhook_resolve
from idempotency_core.models import Notification, ReviewCase

# Filled by the console's app (review_console/apps.py) with its glossary's words.
KIND_WORDS: dict[str, str] = {}
WEBHOOK_TIMEOUT_SECONDS = 10
# A host's addresses tried in turn when one does not take the connection (an IPv6 one
# on a machine without IPv6): two, so that the tries stay within a task's time.
WEBHOOK_ADDRESSES_TRIED = 2
_INTROS = {
    Notification.Reason.OPENED: "A case waits for someone in {target}.",
    Notification.Reason.ESCALATED: "Nobody has taken this case yet: it is escalated to you.",
    Notification.Reason.HANDED_ON: "This case was handed on to you: someone could not decide it.",
}
_SUBJECTS = {
    Notification.Reason.OPENED: "Case {id} waits: {kind}",
    Notification.Reason.ESCALATED: "Nobody has taken case {id}: {kind}",
    Notification.Reason.HANDED_ON: "Case {id} handed on to you: {kind}",
}


class NoticeError(Exception):
    """A notification could not be sent; `permanent`: trying again cannot help."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def kind_words(kind: str) -> str:
    return KIND_WORDS.get(kind) or dict(ReviewCase.Kind.choices).get(kind, kind)


def case_url(case_id: int) -> str:
    return f"{settings.ONEFOLD_CONSOLE_URL}/console/cases/{case_id}/"


def age_words(since: datetime, now: datetime | None = None) -> str:
    seconds = max(0, int(((now or timezone.now()) - since).total_seconds()))
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return "less than a minute"


def _origin(case: ReviewCase) -> tuple[str, str]:
    event = case.event
    if event is None:
        return "(none: found by a check)", "(none)"
    return event.source.name, event.form or "(none)"


def _case_lines(case: ReviewCase) -> list[str]:
    source, form = _origin(case)
    return [
        f"What: {kind_words(case.kind)}",
        f"From: source {source}, form {form}",
        f"Waiting for: {age_words(case.created_at)} (opened {case.created_at:%Y-%m-%d %H:%M} UTC)",
        f"Open it: {case_url(case.pk)}",
    ]


def _footer() -> list[str]:
    return [
        "",
        "Only staff who may open the case get this email. Choose what you receive (every",
        f"case, a digest, or none): {settings.ONEFOLD_CONSOLE_URL}/console/notifications/",
    ]


def _message_id(key: str) -> str:
    domain = settings.DEFAULT_FROM_EMAIL.rpartition("@")[2] or "onefold.invalid"
    return f"<{key}@{domain.strip('> ')}>"


def _intro(row: Notification) -> str:
    route = getattr(row.case, "route", None)
    if row.reason == Notification.Reason.OPENED and getattr(route, "user_id", None):
        return "A case is routed to you."
    target = route.target if route is not None else "your group"
    return _INTROS[Notification.Reason(row.reason)].format(target=target)


def notice_email(row: Notification) -> EmailMessage:
    """One case's email to one person, its Message-ID the row's key."""
    case = row.case
    intro = _intro(row)
    subject = _SUBJECTS[Notification.Reason(row.reason)].format(
        id=case.pk, kind=kind_words(case.kind)
    )
    body = "\n".join([intro, "", *_case_lines(case), *_footer()])
    return EmailMessage(
        subject=subject,
        body=body + "\n",
        to=[row.user.email if row.user is not None else ""],
        headers={"Message-ID": _message_id(row.key)},
    )


def digest_email(rows: Sequence[Notification]) -> EmailMessage:
    """One person's digest: each of its cases in a few lines, one Message-ID for all."""
    count = len(rows)
    lines = [f"{count} case{'' if count == 1 else 's'} for you in Onefold:"]
    for row in rows:
        case = row.case
        why = {"escalated": " (nobody took it)", "handed_on": " (handed on to you)"}.get(
            row.reason, ""
        )
        lines += ["", f"Case {case.pk}{why}", *(f"  {line}" for line in _case_lines(case))]
    keys = "\x1f".join(sorted(row.key for row in rows))
    digest_key = "ntd_" + hashlib.sha256(keys.encode()).hexdigest()[:40]
    user = rows[0].user
    return EmailMessage(
        subject=f"{count} case{'' if count == 1 else 's'} wait{'s' if count == 1 else ''} "
        "for you in Onefold",
        body="\n".join([*lines, *_footer()]) + "\n",
        to=[user.email if user is not None else ""],
        headers={"Message-ID": _message_id(digest_key)},
    )


def webhook_body(row: Notification, url: str) -> dict[str, object]:
    """Slack's and Teams' incoming webhooks read `text`; others get the case as JSON."""
    case = row.case
    intro = _intro(row)
    text = "\n".join([intro, *_case_lines(case)])
    host = httpx.URL(url).host
    if host == "hooks.slack.com":
        return {"text": text}
    if host.endswith((".webhook.office.com", ".logic.azure.com")):
        return {
            "@type": "MessageCard",
            "@context": "https://schema.org/extensions",
            "summary": f"Onefold case {case.pk}",
            "text": text.replace("\n", "\n\n"),
        }
    source, form = _origin(case)
    return {
        "text": text,
        "case": {
            "id": case.pk,
            "kind": case.kind,
            "kind_words": kind_words(case.kind),
            "reason": row.reason,
            "source": source,
            "form": form,
            "opened_at": case.created_at.isoformat(),
            "url": case_url(case.pk),
        },
    }


def webhook_send(row: Notification, url: str) -> None:
    """Posts the notice. The URL is checked again at each send (its host's addresses
    can change since it was applied), and the post goes to the very address checked:
    the connection is made to that IP, with the host's name in the Host header and as
    the TLS server name (SNI, and the name the certificate must match), so that no
    second lookup by httpx can lead it elsewhere. Redirects are not followed."""
    if not url:
        raise NoticeError("The review block has no webhook any more.", permanent=True)
    problem, addresses = webhook_resolve(url)
    if problem is not None:
        raise NoticeError(f"The webhook {problem}.", permanent=True)
    answer = _webhook_post(row, url, addresses)
    if answer.is_success:
        return
    code = answer.status_code
    raise NoticeError(
        f"The webhook answered {code}.", permanent=400 <= code < 500 and code not in (408, 429)
    )


def _webhook_post(row: Notification, url: str, addresses: Sequence[str]) -> httpx.Response:
    """Posts to the first of the checked addresses that takes the connection, as a
    connection to the name would try them in turn (an IPv6 address first on a machine
    without IPv6, say). Only a connection that failed moves on: nothing was sent."""
    target = httpx.URL(url)
    failure: httpx.HTTPError | None = None
    with httpx.Client(timeout=WEBHOOK_TIMEOUT_SECONDS) as client:
        for address in addresses[:WEBHOOK_ADDRESSES_TRIED]:
            try:
                return client.post(
                    target.copy_with(host=address),
                    json=webhook_body(row, url),
                    headers={"Idempotency-Key": row.key, "Host": target.netloc.decode("ascii")},
                    extensions={"sni_hostname": target.host},
                    follow_redirects=False,
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure = exc
            except httpx.HTTPError as exc:
                failure = exc
                break
    name = type(failure).__name__ if failure is not None else "no address"
    raise NoticeError(f"The webhook could not be reached ({name}).") from failure
