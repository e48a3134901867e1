"""The configuration document's `review` block: who receives a case, how they hear of
it, and who hears when nobody takes it.

```yaml
review:
  routes:                    # first match wins; no match: the group "Reviewers"
    - match: {source: shop, form: order, kind: [suspected_duplicate, duplicate_held]}
      to: Sales desk         # a group's name, or a username
  notify: {email: true, digest_minutes: 0, webhook: ""}
  escalate: {after_minutes: 240, to: Replay admins}
```

`review_check` validates the block's shape (called by `document_problems`, with its
lines); `review_target_problems` checks, against the database, that each `to` names a
group or a user. `ReviewSettings.of` reads a validated document for the services that
route and notify (review/notifications.py). A document without a `review` block
notifies nobody: routing starts when the business writes one.

A webhook must be `https` and its host must resolve to public addresses only
(`webhook_problem`): a Settings admin must not reach the internal network through it.
`ONEFOLD_WEBHOOK_ALLOW_PRIVATE=1` lifts the address rule, for tests on loopback.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import Group, User

from idempotency_core.models import CaseKind

if TYPE_CHECKING:
    from idempotency_core.configuration.document import Check, Marks, Path, Problem

DEFAULT_GROUP = "Reviewers"
MATCH_KEYS = ("source", "form", "kind")
REVIEW_KEYS = ("routes", "notify", "escalate")
NOTIFY_KEYS = ("email", "digest_minutes", "webhook")
ESCALATE_KEYS = ("after_minutes", "to")
# Every reconciliation kind at once, as the contract writes it.
RECON_ALL = "recon_*"
KIND_CODES = frozenset(CaseKind.values)
MAX_ROUTES = 100
MAX_MINUTES = 60 * 24 * 30
MAX_NAME = 150
# The order an export writes the block in.
REVIEW_ORDER: dict[str, Any] = {
    "routes": {},
    "notify": {key: {} for key in NOTIFY_KEYS},
    "escalate": {key: {} for key in ESCALATE_KEYS},
}


def review_check(check: Check, value: object) -> None:
    """Every problem of the `review` block, added to `check` with its place."""
    path: Path = ("review",)
    block = check.mapping(value, path)
    if block is None:
        return
    check.known_keys(block, path, REVIEW_KEYS)
    routes = block.get("routes")
    if routes is not None and (not isinstance(routes, list) or len(routes) > MAX_ROUTES):
        check.add((*path, "routes"), f"must be a list of at most {MAX_ROUTES} routes")
    elif routes:
        for number, route in enumerate(routes):
            _route_check(check, (*path, "routes", number), route)
    notify = check.mapping(block.get("notify"), (*path, "notify"))
    if notify is not None:
        _notify_check(check, (*path, "notify"), notify)
    if block.get("escalate") is not None:
        _escalate_check(check, (*path, "escalate"), block["escalate"])


def _route_check(check: Check, path: Path, value: object) -> None:
    route = check.mapping(value, path)
    if route is None:
        return
    check.known_keys(route, path, ("match", "to"))
    _name_check(check, (*path, "to"), route.get("to"))
    match = check.mapping(route.get("match"), (*path, "match"))
    if match is None:
        return
    check.known_keys(match, (*path, "match"), MATCH_KEYS)
    source = match.get("source")
    if source is not None and source not in check.sources:
        check.add((*path, "match", "source"), f"no source is named {source!r}")
    if match.get("form") is not None and not isinstance(match["form"], str):
        check.add((*path, "match", "form"), "must be a form's name")
    kinds = match.get("kind")
    for kind in kinds if isinstance(kinds, list) else [] if kinds is None else [kinds]:
        if kind != RECON_ALL and kind not in KIND_CODES:
            check.add(
                (*path, "match", "kind"),
                f"{kind!r} is not a case kind; expected one of {', '.join(sorted(KIND_CODES))}"
                f" or {RECON_ALL}",
            )


def _notify_check(check: Check, path: Path, notify: Mapping[str, Any]) -> None:
    check.known_keys(notify, path, NOTIFY_KEYS)
    if "email" in notify and not isinstance(notify["email"], bool):
        check.add((*path, "email"), "must be true or false")
    if "digest_minutes" in notify:
        _minutes_check(check, (*path, "digest_minutes"), notify["digest_minutes"], least=0)
    webhook = notify.get("webhook")
    if webhook is not None and not isinstance(webhook, str):
        check.add((*path, "webhook"), "must be an https URL, or empty")
    elif webhook:
        problem = webhook_problem(webhook)
        if problem is not None:
            check.add((*path, "webhook"), problem)


def _escalate_check(check: Check, path: Path, value: object) -> None:
    escalate = check.mapping(value, path)
    if escalate is None:
        return
    check.known_keys(escalate, path, ESCALATE_KEYS)
    for key in ESCALATE_KEYS:
        if key not in escalate:
            check.add(path, f"needs {key}")
    if "after_minutes" in escalate:
        _minutes_check(check, (*path, "after_minutes"), escalate["after_minutes"], least=1)
    if "to" in escalate:
        _name_check(check, (*path, "to"), escalate["to"])


def _minutes_check(check: Check, path: Path, value: object, *, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        check.add(path, "must be a whole number of minutes")
    elif not least <= value <= MAX_MINUTES:
        check.add(path, f"must be from {least} to {MAX_MINUTES} minutes")


def _name_check(check: Check, path: Path, value: object) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        check.add(path, f"must name a group or a user (1 to {MAX_NAME} characters)")


def webhook_problem(url: str) -> str | None:
    """Why `url` may not be the webhook, or None: https, a host, no credentials in it,
    and every address the host resolves to public (unless the operator allows private
    ones, ONEFOLD_WEBHOOK_ALLOW_PRIVATE)."""
    return webhook_resolve(url)[0]


def webhook_resolve(url: str) -> tuple[str | None, tuple[str, ...]]:
    """(why `url` may not be the webhook, or None; the addresses checked, in the order
    to connect to them).

    The send connects to that address itself (review/notice_content.py), so a host that
    resolves to a public address for this check and to a private one a moment later
    (DNS rebinding) is still posted to the address checked."""
    try:
        parts = urlsplit(url)
        port = parts.port or 443
    except ValueError:
        return "is not a URL", ()
    if parts.scheme != "https" or not parts.hostname:
        return "must be an https:// URL", ()
    if parts.username or parts.password:
        return "must not carry a user name or password", ()
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return f"its host {parts.hostname!r} cannot be resolved", ()
    # In the resolver's order (the one a connection would try first), without repeats.
    addresses = tuple(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))
    if not addresses:
        return f"its host {parts.hostname!r} cannot be resolved", ()
    if not settings.ONEFOLD_WEBHOOK_ALLOW_PRIVATE:
        for address in addresses:
            if not _public(address):
                return (
                    f"its host {parts.hostname!r} resolves to {address}, a loopback, private "
                    "or link-local address: only a public address may receive notifications"
                ), ()
    return None, addresses


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    # An IPv4 address written as IPv6 (::ffff:10.0.0.1) is judged as the IPv4 one.
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global


def review_target_problems(document: object, *, marks: Marks | None = None) -> list[Problem]:
    """A problem for each `to` (a route's, the escalation's) that names neither a group
    nor a user that exists."""
    from idempotency_core.configuration.document import Problem

    review = document.get("review") if isinstance(document, Mapping) else None
    if not isinstance(review, Mapping):
        return []
    named: list[tuple[Path, str]] = []
    routes = review.get("routes")
    for number, route in enumerate(routes if isinstance(routes, list) else []):
        if isinstance(route, Mapping) and isinstance(route.get("to"), str):
            named.append((("review", "routes", number, "to"), route["to"]))
    escalate = review.get("escalate")
    if isinstance(escalate, Mapping) and isinstance(escalate.get("to"), str):
        named.append((("review", "escalate", "to"), escalate["to"]))
    names = {name.strip() for _path, name in named}
    known = set(Group.objects.filter(name__in=names).values_list("name", flat=True))
    known |= set(User.objects.filter(username__in=names).values_list("username", flat=True))
    return [
        Problem(path, f"no group or user is named {name!r}", marks.line_of(path) if marks else None)
        for path, name in named
        if name.strip() and name.strip() not in known
    ]


@dataclass(frozen=True)
class Route:
    source: str | None
    form: str | None
    kinds: frozenset[str] | None
    to: str

    def matches(self, *, source: str, form: str, kind: str) -> bool:
        if self.source is not None and self.source != source:
            return False
        if self.form is not None and self.form != form:
            return False
        if self.kinds is None:
            return True
        return kind in self.kinds or (RECON_ALL in self.kinds and kind.startswith("recon_"))


@dataclass(frozen=True)
class ReviewSettings:
    """A validated `review` block as the services read it; `configured` is False when
    the document has none (then nobody is notified)."""

    configured: bool = False
    routes: tuple[Route, ...] = ()
    email: bool = True
    digest_minutes: int = 0
    webhook: str = ""
    escalate_after_minutes: int | None = None
    escalate_to: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> ReviewSettings:
        block = document.get("review")
        if not isinstance(block, Mapping):
            return cls()
        routes = []
        for route in block.get("routes") or []:
            match = route.get("match") or {}
            kind = match.get("kind")
            kinds = None if kind is None else frozenset(kind if isinstance(kind, list) else [kind])
            routes.append(
                Route(match.get("source"), match.get("form"), kinds, str(route["to"]).strip())
            )
        notify = block.get("notify") or {}
        escalate = block.get("escalate") or {}
        return cls(
            configured=True,
            routes=tuple(routes),
            email=bool(notify.get("email", True)),
            digest_minutes=int(notify.get("digest_minutes") or 0),
            webhook=str(notify.get("webhook") or ""),
            escalate_after_minutes=escalate.get("after_minutes"),
            escalate_to=str(escalate.get("to") or "").strip(),
            raw=block,
        )

    def route_for(self, *, source: str, form: str, kind: str) -> str:
        """The first matching route's `to`, else the group Reviewers."""
        for route in self.routes:
            if route.matches(source=source, form=form, kind=kind):
                return route.to
        return DEFAULT_GROUP
