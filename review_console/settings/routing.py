"""Reads of routing for the console: a routed case first in its people's *Next case*,
and the notifications that could not be sent (the dashboard's warning)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from idempotency_core.models import CaseRoute, ReviewCase
from idempotency_core.review.notifications import notification_failures

FAILURES_SHOWN = 5
FAILURES_SINCE = timedelta(days=7)


def _theirs(user: Any) -> Q:
    """A route that reaches `user`: to them, to a group of theirs, or escalated to one."""
    groups = user.groups.all()
    return (
        Q(user_id=user.pk)
        | Q(group__in=groups)
        | Q(escalated_at__isnull=False, escalated_to__in=groups.values("name"))
    )


def routed_first(cases: QuerySet[ReviewCase], user: Any) -> QuerySet[ReviewCase]:
    """`cases` with those routed to `user`, or to a group of theirs (or escalated to
    one), first; then the oldest first, as *Next case* has always taken them."""
    mine = CaseRoute.objects.filter(case=OuterRef("pk")).filter(_theirs(user))
    return cases.annotate(routed_to_me=Exists(mine)).order_by("-routed_to_me", "created_at", "id")


def handed_elsewhere(cases: QuerySet[ReviewCase], user: Any) -> QuerySet[ReviewCase]:
    """`cases` without those handed on to a group `user` is not in: handed on because
    their people decide them, they never come back to *Next case* of whoever could not
    (nor of their colleagues). A superuser decides anything."""
    if user.is_superuser:
        return cases
    away = CaseRoute.objects.filter(case=OuterRef("pk"), handed_on_at__isnull=False).exclude(
        _theirs(user)
    )
    return cases.exclude(Exists(away))


# The cases a person who fixes cases without taking them sees on the dashboard.
ROUTED_SHOWN = 5


def routed_to_me(user: Any) -> dict[str, Any]:
    """Open, nobody's cases routed, handed on or escalated to `user` or a group of
    theirs, oldest first: the dashboard's *Next case* for those who may open cases and
    fix their cause but not take them (Settings admins, for unreadable submissions),
    so that a case handed on to them comes first there too."""
    mine = CaseRoute.objects.filter(case=OuterRef("pk")).filter(_theirs(user))
    cases = ReviewCase.objects.filter(
        Exists(mine), status=ReviewCase.Status.OPEN, owner__isnull=True
    ).order_by("created_at", "id")
    return {"cases": list(cases[:ROUTED_SHOWN]), "total": cases.count()}


def failures_summary(*, now: datetime) -> dict[str, Any]:
    failures = notification_failures(since=now - FAILURES_SINCE)
    return {
        "notice_failures": list(failures[:FAILURES_SHOWN]),
        "notice_failures_total": failures.count(),
    }
