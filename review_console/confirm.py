"""The console's confirmed action ("confirm, act, redirect"), written once.

An action's button POSTs without `confirm`: the confirmation page is shown, asking
for a reason. The page POSTs with `confirm=yes`: a valid form runs the service, a
message is flashed and the browser is redirected. A service's refusal
(`ActionRefusedError`) becomes the form's error on the same page again, the typed
reason kept: the console's one mapping of that family.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from idempotency_core.review.refusals import ActionRefusedError

# What a success says or where it goes, fixed or from (the form's data, what the
# service returned).
Done = str | Callable[[dict[str, Any], Any], str]


def confirmed(request: HttpRequest) -> bool:
    """Whether this POST comes from the confirmation page (rather than a first click)."""
    return request.POST.get("confirm") == "yes"


def confirmed_action(
    request: HttpRequest,
    form: forms.Form,
    *,
    act: Callable[[dict[str, Any]], object],
    done_url: Done,
    page: Callable[[], HttpResponse],
    success: Done | None = None,
) -> HttpResponse:
    """A bound, valid `form` runs `act` with its data, flashes `success` (None: `act`
    says what it did itself) and redirects to `done_url`; otherwise, or when `act` is
    refused, `page()` renders the confirmation (again, with the refusal)."""
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        try:
            result = act(data)
        except ActionRefusedError as exc:
            form.add_error(None, str(exc))
        else:
            if success is not None:
                messages.success(request, _said(success, data, result))
            return redirect(_said(done_url, data, result))
    return page()


def _said(value: Done, data: dict[str, Any], result: Any) -> str:
    return value if isinstance(value, str) else value(data, result)
