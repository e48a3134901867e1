"""A person's requests on the console (GDPR articles 15 and 17), for users with the
`erase_personal_data` permission: the export as a download, and the erasure behind a
confirmation page that shows what would go, with a reason. Both are the services of
idempotency_core/privacy/, audited as the person's digest, never the address.

Every request carries the address in a POST body: never in a URL (access logs) nor in a
message (the session table), so the console itself keeps no copy of it.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse

from idempotency_core.privacy.crm import crm_erasures_enqueue
from idempotency_core.privacy.erasure import (
    PersonBusyError,
    PersonNotFoundError,
    person_erase,
    person_erase_preview,
)
from idempotency_core.privacy.export import person_export
from idempotency_core.privacy.person import person_digest
from review_console.http import require_GET, require_POST
from review_console.permissions import ERASE_PERSONAL_DATA, acting_user, console_permission

NO_DATA = "Onefold holds nothing about that address."
TEMPLATE = "review_console/privacy/privacy.html"
# What an erasure removes or settles (the service's labels), in a person's words: one,
# many. A label not listed is one of the service's "<rows> quoting them".
ERASED_WORDS: dict[str, tuple[str, str]] = {
    "payloads": ("submission as Onefold read it", "submissions as Onefold read them"),
    "raw deliveries": ("submission as it arrived", "submissions as they arrived"),
    "rendered contents": (
        "text written for them (an email, a CRM entry)",
        "texts written for them (emails, CRM entries)",
    ),
    "confirmation counts": (
        "place in the daily limit of confirmation emails",
        "places in the daily limit of confirmation emails",
    ),
    "cases closed": ("case closed", "cases closed"),
    "operations cancelled": ("step not made yet, cancelled", "steps not made yet, cancelled"),
    "audit entries rewritten": (
        "entry of the history of decisions rewritten",
        "entries of the history of decisions rewritten",
    ),
    "review cases quoting them": ("case quoting them", "cases quoting them"),
    "operations quoting them": ("step quoting them", "steps quoting them"),
    "attempts quoting them": ("try quoting them", "tries quoting them"),
}
OTHER_QUOTES = ("other note quoting them", "other notes quoting them")


def erased_words(removed: dict[str, int]) -> list[str]:
    """Each non-zero count of the erasure's report as "3 cases closed"."""
    return [
        f"{count} {ERASED_WORDS.get(label, OTHER_QUOTES)[0 if count == 1 else 1]}"
        for label, count in removed.items()
        if count
    ]


class PersonForm(forms.Form):
    email = forms.EmailField(
        label="The person's email address",
        max_length=254,
        widget=forms.TextInput(
            attrs={"class": "reason", "autocomplete": "off", "inputmode": "email"}
        ),
    )


def _export_form(data: Any = None) -> PersonForm:
    # Its own ids: the erasure's form on the same page has an email field too.
    return PersonForm(data, auto_id="export_%s")


class ErasureForm(PersonForm):
    confirm = forms.CharField(widget=forms.HiddenInput, required=False)
    reason = forms.CharField(
        label="Reason (the request: when and how it was made)",
        widget=forms.TextInput(attrs={"class": "reason", "autocomplete": "off"}),
        strip=True,
    )
    crm = forms.BooleanField(label="Also delete the person at the CRM", required=False)


@require_GET
@console_permission(ERASE_PERSONAL_DATA)
def privacy(request: HttpRequest) -> HttpResponse:
    return render(request, TEMPLATE, {"export_form": _export_form(), "erase_form": ErasureForm()})


@require_POST
@console_permission(ERASE_PERSONAL_DATA)
def privacy_export(request: HttpRequest) -> HttpResponse:
    form = _export_form(request.POST)
    if not form.is_valid():
        return _page(request, export_form=form)
    address = form.cleaned_data["email"]
    document = person_export(address=address, actor=acting_user(request))
    if document is None:
        form.add_error(None, NO_DATA)
        return _page(request, export_form=form)
    name = f"personal-data-{person_digest(address)[:12]}.json"
    response = HttpResponse(
        json.dumps(document, cls=DjangoJSONEncoder, indent=2),
        content_type="application/json; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@console_permission(ERASE_PERSONAL_DATA)
def privacy_erase(request: HttpRequest) -> HttpResponse:
    """First post: the confirmation page with what would go. Confirmed: erased, the
    CRM's deletions queued for the workers, and back to the page with what was removed."""
    form = ErasureForm(request.POST)
    if not form.is_valid():
        return _page(request, erase_form=form)
    data = form.cleaned_data
    try:
        if data["confirm"] != "yes":
            preview = person_erase_preview(
                address=data["email"], reason=data["reason"], crm=data["crm"]
            )
            confirm = ErasureForm(initial={**data, "confirm": "yes"})
            removed = erased_words(preview.removed)
            return render(
                request,
                "review_console/privacy/privacy_confirm.html",
                {"form": confirm, "report": preview, "removed": removed},
            )
        report = person_erase(
            address=data["email"],
            reason=data["reason"],
            actor=acting_user(request),
            crm=data["crm"],
        )
    except (PersonNotFoundError, PersonBusyError) as exc:
        form.add_error(None, NO_DATA if isinstance(exc, PersonNotFoundError) else str(exc))
        return _page(request, erase_form=form)
    crm_erasures_enqueue(list(report.crm_operations))
    done = ", ".join(erased_words(report.removed))
    asked = len(report.crm_operations)
    enquiries = f"{asked} enquir{'y' if asked == 1 else 'ies'}"
    crm = f"; the CRM is asked to delete {enquiries}" if asked else ""
    messages.success(
        request,
        f"Erased the personal data of {report.events} submission{'' if report.events == 1 else 's'}"
        f" ({done or 'nothing was left'})"
        f"{crm}. The request is in the history of decisions (entry {report.entry_id}).",
    )
    return HttpResponseRedirect(reverse("console:privacy"))


def _page(
    request: HttpRequest,
    *,
    export_form: PersonForm | None = None,
    erase_form: ErasureForm | None = None,
) -> HttpResponse:
    context = {
        "export_form": export_form or PersonForm(),
        "erase_form": erase_form or ErasureForm(),
    }
    return render(request, TEMPLATE, context, status=200)
