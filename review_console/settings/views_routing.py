"""Who receives a case, on the console: each person's choice of notifications and the
Settings page of the configuration's `review` block (*Hand on* is a case decision:
cases/views_decisions.py).

- `notifications/` (anyone who sees cases): every case, a digest, or none, stored per
  person (`NotificationChoice`), and the notifications they were sent lately.
- `settings/review/` (Settings admins): the block as YAML, checked like a file given to
  `manage.py config apply` (each problem with its line), saved as a new version with a
  reason (`config_apply`: versioned and audited with the rest), and who each route
  reaches (members without an address named, since they get nothing).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.models import Group, User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from idempotency_core.configuration.review_block import DEFAULT_GROUP, ReviewSettings
from idempotency_core.configuration.versions import (
    ConfigInvalidError,
    config_apply,
    config_current,
    document_ordered,
)
from idempotency_core.configuration.yamlfile import YamlFileError, yaml_dump, yaml_load
from idempotency_core.models import Notification, NotificationChoice
from idempotency_core.review.notifications import people_of
from review_console.http import require_methods
from review_console.permissions import (
    CHANGE_CONFIG,
    VIEW_CASES,
    acting_user,
    console_permission,
)

EXAMPLE = """\
review:
  routes:
    - match: {kind: unreadable_submission}
      to: Settings admins
  notify:
    email: true
    digest_minutes: 0
    webhook: ""
  escalate:
    after_minutes: 240
    to: Replay admins
"""


class ChoiceForm(forms.Form):
    choice = forms.ChoiceField(
        choices=[("", "As the business configured it"), *NotificationChoice.Choice.choices],
        required=False,
        widget=forms.RadioSelect,
        label="Email me",
    )


@require_methods("GET", "POST")
@console_permission(VIEW_CASES)
def notifications_choice(request: HttpRequest) -> HttpResponse:
    user = acting_user(request)
    current = NotificationChoice.objects.filter(user=user).values_list("choice", flat=True).first()
    form = ChoiceForm(request.POST or None, initial={"choice": current or ""})
    if request.method == "POST" and form.is_valid():
        chosen = form.cleaned_data["choice"]
        if chosen:
            NotificationChoice.objects.update_or_create(user=user, defaults={"choice": chosen})
        else:
            NotificationChoice.objects.filter(user=user).delete()
        messages.success(request, "Saved: it applies to the next case.")
        return redirect("console:notifications")
    config = ReviewSettings.of(config_current().document)
    recent = (
        Notification.objects.filter(user=user)
        .select_related("case")
        .order_by("-created_at", "-pk")[:20]
    )
    return render(
        request,
        "review_console/settings/notifications.html",
        {
            "form": form,
            "config": config,
            "has_address": bool(user.email.strip()),
            "recent": recent,
        },
    )


class ReviewBlockForm(forms.Form):
    text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false", "class": "mono"}),
        label="The review block (YAML)",
        required=False,
    )
    reason = forms.CharField(
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
        help_text="Kept with the version, in the history of versions and decisions.",
    )


def _block_text() -> str:
    review = document_ordered(config_current().document).get("review")
    return yaml_dump({"review": review}) if review else ""


def _reach(config: ReviewSettings) -> list[dict[str, Any]]:
    """Who each route (and the escalation) reaches, and who of them has no address."""
    names = [route.to for route in config.routes] + [DEFAULT_GROUP]
    if config.escalate_to:
        names.append(config.escalate_to)
    rows = []
    for name in dict.fromkeys(names):
        group = Group.objects.filter(name=name).first()
        user = None if group is not None else User.objects.filter(username=name).first()
        people = people_of(group, user)
        rows.append(
            {
                "name": name,
                "found": group is not None or user is not None,
                "reached": [p.get_username() for p in people if p.email.strip()],
                "unreached": [p.get_username() for p in people if not p.email.strip()],
            }
        )
    return rows


@require_methods("GET", "POST")
@console_permission(CHANGE_CONFIG)
def settings_review(request: HttpRequest) -> HttpResponse:
    form = ReviewBlockForm(request.POST or None, initial={"text": _block_text()})
    problems: list[str] = []
    if request.method == "POST" and form.is_valid():
        problems = _review_save(request, form.cleaned_data)
        if not problems:
            return redirect("console:settings-review")
    current = config_current()
    return render(
        request,
        "review_console/settings/settings_review.html",
        {
            "form": form,
            "problems": problems,
            "version": current.number,
            "reach": _reach(ReviewSettings.of(current.document)),
            "example": EXAMPLE,
        },
    )


def _review_save(request: HttpRequest, data: dict[str, Any]) -> list[str]:
    """Applies the typed block; the problems to show, or none when it was saved."""
    text = data["text"].strip()
    try:
        document, marks, problems = yaml_load(text) if text else ({"review": {}}, None, [])
    except YamlFileError as exc:
        return [str(exc.problem)]
    if problems:
        return [str(problem) for problem in problems]
    if not isinstance(document, dict) or set(document) != {"review"}:
        return ["Write the block under one top-level key, review: (as in the example)."]
    try:
        result = config_apply(
            document={"review": document["review"] or {}},
            actor=acting_user(request),
            reason=data["reason"],
            marks=marks,
        )
    except ConfigInvalidError as exc:
        return [str(problem) for problem in exc.problems]
    if result.changed:
        messages.success(request, f"Saved as version {result.number}.")
    else:
        messages.info(request, "Nothing changed: no new version.")
    return []
