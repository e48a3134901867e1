"""The audit trail page and its CSV export (Audit viewers): who did what, when and why."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from typing import Any

from django.http import (
    HttpRequest,
    HttpResponse,
    QueryDict,
    StreamingHttpResponse,
)
from django.shortcuts import render

from idempotency_core.models import AuditEntry
from review_console.audit.filters import AuditFilter
from review_console.http import querystring, require_GET
from review_console.paging import KeysetPage, keyset_page
from review_console.permissions import (
    CHANGE_SOURCE,
    VIEW_AUDIT,
    console_permission,
)


@require_GET
@console_permission(VIEW_AUDIT)
def audit_list(request: HttpRequest) -> HttpResponse:
    filterset = audit_filterset(request.GET)
    page = (
        keyset_page(
            filterset.qs,
            fields=("-at", "-id"),
            after=request.GET.get("after", ""),
            before=request.GET.get("before", ""),
        )
        if filterset.is_valid()
        else KeysetPage(items=[])
    )
    shown = audit_details_for(request.user)
    for entry in page.items:
        entry.details = shown(entry.details)
    return render(
        request,
        "review_console/audit/audit_list.html",
        {
            "filter": filterset,
            "page": page,
            "querystring": querystring(request),
        },
    )


# Details that name a secret by its first characters (a signing secret, a CAPTCHA
# key, an API key): shown only to those who manage sources (security review F11).
_SECRET_DETAILS = frozenset({"prefix", "secret_prefix", "previous_prefix", "prefixes"})


def audit_details_for(user: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """How this viewer reads an audit entry's details: as stored, or without secrets'
    first characters for a viewer who may not change sources."""
    if user.has_perm(CHANGE_SOURCE):
        return lambda details: details
    return lambda details: {
        key: "(shown to those who manage sources)" if key in _SECRET_DETAILS else value
        for key, value in (details or {}).items()
    }


class _Echo:
    def write(self, value: str) -> str:
        return value


# What a spreadsheet reads as the start of a formula (OWASP, "CSV Injection"): a
# reviewer's reason "=HYPERLINK(...)" must open as text, not run as a formula.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    return f"'{text}" if text.startswith(_FORMULA_STARTS) else text


@require_GET
@console_permission(VIEW_AUDIT)
def audit_export(request: HttpRequest) -> StreamingHttpResponse:
    """The filtered trail as CSV, streamed: an export of a year must not fill memory.
    Every cell that a spreadsheet would read as a formula is written as text."""
    filterset = audit_filterset(request.GET)
    rows = filterset.qs if filterset.is_valid() else AuditEntry.objects.none()
    writer = csv.writer(_Echo())
    shown = audit_details_for(request.user)

    def lines() -> Iterator[str]:
        yield writer.writerow(
            ["at", "actor", "action", "case", "event", "operation", "reason", "details"]
        )
        for entry in rows.iterator(chunk_size=2000):
            cells = [
                entry.at.isoformat(),
                entry.actor_label,
                entry.action,
                entry.case_id or "",
                entry.event_id or "",
                entry.operation_id or "",
                entry.reason,
                # JSON, not Python's repr: the details are read by other tools.
                json.dumps(shown(entry.details), ensure_ascii=False, sort_keys=True),
            ]
            yield writer.writerow([_csv_cell(cell) for cell in cells])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="onefold-audit.csv"'
    return response


def audit_filterset(params: QueryDict) -> AuditFilter:
    return AuditFilter(
        params, queryset=AuditEntry.objects.select_related("case", "actor").order_by("-at")
    )
