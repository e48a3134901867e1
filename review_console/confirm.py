"""The console's confirmed action: a confirmation page asks for a reason, the
confirmed POST (`confirm=yes`) runs the service, a message is flashed and the page
redirects. A service's refusal (`ActionRefusedError`) becomes the form's error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.http import (
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import redirect

from idempotency_core.review.refusals import ActionRefusedError


def confirmed(request: HttpRequest) -> bool:
    return request.POST.get("confirm") == "yes"


def confirm_action(
    request: HttpRequest,
    form: forms.Form,
    *,
    act: Callable[[dict[str, Any]], object],
    success: str | Callable[[dict[str, Any]], str],
    done_url: str,
) -> HttpResponse | None:
    """Runs a confirmed action: a valid form calls the service, then a message and a
    redirect to `done_url`. The console's one mapping of a service's refusal
    (`ActionRefusedError`): it becomes the form's error, and None tells the view to
    render the page again with it (the typed reason kept)."""
    if not (form.is_bound and form.is_valid()):
        return None
    try:
        act(form.cleaned_data)
    except ActionRefusedError as exc:
        form.add_error(None, str(exc))
        return None
    messages.success(request, success if isinstance(success, str) else success(form.cleaned_data))
    return redirect(done_url)
