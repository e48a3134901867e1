"""The console's source pages: how each sender is set up, and what it has delivered.

A source's page shows its profile, its hook URL, the prefixes of its signing
secrets (never a secret), its settings, what to do in the provider, and its last
deliveries with their verification outcome: never a delivery's body or the
event's payload. Enabling, disabling and secrets are actions behind the console's
confirmation with a reason (`confirm.confirmed_action`); the services that take them
(`intake.sources.source_enable`, `source_secret_issue`, `source_secret_revoke`)
write the audit entries. A new secret is shown once, in the answer to the POST that
added it: not in a message (cookie storage), not on the source's page.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone

from idempotency_core.intake.remap import unreadable_waiting
from idempotency_core.intake.senders.captcha import PROVIDERS as CAPTCHA_PROVIDERS
from idempotency_core.intake.senders.profiles import API, PRESETS, Profile, profile_resolve
from idempotency_core.intake.sources import (
    CAPTCHA_PROFILE,
    CAPTCHA_SECRET_SHOWN,
    InvalidProfileError,
    source_captcha_set,
    source_enable,
    source_secret_issue,
    source_secret_revoke,
    source_settings_change,
    thank_you_url_check,
)
from idempotency_core.models import Event, Source
from idempotency_core.review.refusals import ActionRefusedError
from review_console.confirm import Done, confirmed, confirmed_action
from review_console.forms import ReasonForm
from review_console.http import require_GET, require_POST
from review_console.journey.selectors import journey_forms
from review_console.permissions import CHANGE_SOURCE, VIEW_CASES, acting_user, console_permission
from review_console.sources.selectors import (
    RECENT_DELIVERIES,
    latest_refusal,
    recent_deliveries,
    recent_outcomes,
)

DUPLICATE_POLICIES = {
    "flag": "Flag: both are processed; a case offers a merge",
    "hold": "Hold: the later one waits for a person before its CRM write",
}


class SourceRefusedError(ActionRefusedError):
    """A source service refused (`InvalidProfileError`), in the console's refusal family."""


def _refusing(act: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], object]:
    """`act` with a source service's refusal turned into one `confirmed_action` maps."""

    def run(data: dict[str, Any]) -> object:
        try:
            return act(data)
        except InvalidProfileError as exc:
            raise SourceRefusedError(str(exc)) from exc

    return run


def _secret_field(label: str, help_text: str) -> forms.CharField:
    """A secret typed in: optional, never shown back, never offered by the browser."""
    return forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        label=label,
        help_text=help_text,
    )


class SecretAddForm(ReasonForm):
    field_order = ("secret", "reason")
    secret = _secret_field(
        "Secret (leave empty to generate one)",
        "Type the provider's own secret when it issues one (Webflow, Formspree, "
        "HubSpot); otherwise Onefold generates 32 random bytes. At least 32 characters.",
    )


class SourceSettingsForm(ReasonForm):
    field_order = ("thank_you_url", "duplicates", "reason")
    thank_you_url = forms.CharField(
        required=False,
        max_length=500,
        label="Thank-you URL",
        help_text="Where a browser posting an html form lands (303): an absolute https:// "
        "URL (http:// only on localhost). Empty: the sender gets the JSON answer.",
    )
    duplicates = forms.ChoiceField(choices=list(DUPLICATE_POLICIES.items()))

    def clean_thank_you_url(self) -> str:
        # The one rule create_source and the admin apply too.
        try:
            return thank_you_url_check(self.cleaned_data.get("thank_you_url") or "")
        except InvalidProfileError as exc:
            raise forms.ValidationError(str(exc)) from exc


class SecretRemoveForm(ReasonForm):
    field_order = ("secret_prefix", "reason")
    # Not `prefix`: a form's `prefix` is its HTML name prefix.
    secret_prefix = forms.ChoiceField(label="Secret to remove (by prefix)")

    def __init__(self, *args: Any, source: Source, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        prefixes = source.secrets.order_by("created_at").values_list("prefix", flat=True)
        field = self.fields["secret_prefix"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(p, f"{p}…") for p in dict.fromkeys(prefixes)]


# -- reads (nothing here writes) -----------------------------------------------------


def profile_of(source: Source) -> Profile | None:
    """The source's profile with its overrides; None for the JSON API (no hook)."""
    if source.profile not in PRESETS:
        return None
    try:
        return profile_resolve(source.profile, source.profile_overrides)
    except ValueError:  # overrides that no longer fit: the preset still describes it
        return PRESETS[source.profile]


def profile_label(name: str) -> str:
    if name == API:
        return "JSON API (API key)"
    preset = PRESETS.get(name)
    return preset.label if preset else f"{name} (unknown profile)"


def hook_of(request: HttpRequest, source: Source, profile: Profile | None) -> dict[str, Any]:
    """The hook's absolute URL as this request sees it, and how the sender proves itself."""
    if profile is None:
        return {"kind": "api", "url": request.build_absolute_uri(reverse("submission-create"))}
    url = request.build_absolute_uri(reverse("hook", args=[source.name]))
    return {
        "kind": "signed" if profile.signs else "token",
        "url": url,
        "public_url": profile.public_url,
    }


# -- pages ---------------------------------------------------------------------------


@require_GET
@console_permission(VIEW_CASES)
def source_list(request: HttpRequest) -> HttpResponse:
    counts = recent_outcomes(since=timezone.now() - timedelta(hours=24))
    rows = [
        {"source": source, "label": profile_label(source.profile), "counts": counts[source.pk]}
        for source in Source.objects.order_by("name").only("name", "profile", "is_active")
    ]
    return render(
        request,
        "review_console/sources/source_list.html",
        {"rows": rows, "can_change": request.user.has_perm(CHANGE_SOURCE)},
    )


@require_GET
@console_permission(VIEW_CASES)
def source_detail(request: HttpRequest, source_id: int) -> HttpResponse:
    source = get_object_or_404(Source, pk=source_id)
    profile = profile_of(source)
    return render(
        request,
        "review_console/sources/source_detail.html",
        {
            "source": source,
            "profile": profile,
            "label": profile_label(source.profile),
            "hook": hook_of(request, source, profile),
            # `only`: the secret column is never read for this page.
            "secrets": list(source.secrets.order_by("created_at").only("prefix", "created_at")),
            "duplicates": DUPLICATE_POLICIES.get(source.duplicates, source.duplicates),
            "deliveries": recent_deliveries(source),
            "refusal": latest_refusal(source) if profile is not None else None,
            "recent": RECENT_DELIVERIES,
            "can_change": request.user.has_perm(CHANGE_SOURCE),
            "captcha_possible": source.profile == CAPTCHA_PROFILE,
            "captcha": captcha_of(source),
            "unreadable_waiting": Event.objects.filter(unreadable_waiting(), source=source).count()
            if profile is not None
            else 0,
            "journey_forms": journey_forms(source),
        },
    )


# -- actions (POST only, behind a confirmation with a reason) -------------------------


def _source_url(source: Source) -> str:
    return reverse("console:source-detail", args=[source.pk])


def _source_confirm_page(
    request: HttpRequest, source: Source, form: forms.Form, **context: Any
) -> HttpResponse:
    return render(
        request,
        "review_console/sources/source_confirm.html",
        {"source": source, "form": form, **context},
    )


def _source_action(
    request: HttpRequest,
    source: Source,
    form: forms.Form,
    *,
    service: Callable[..., object],
    success: Done,
    page: dict[str, Any] | Callable[[], dict[str, Any]],
    fields: dict[str, str] | None = None,
    given: dict[str, Any] | None = None,
) -> HttpResponse:
    """A source's confirmed action: `service(source=, actor=, reason=)` with the form's
    `fields` (the service's argument: the form's field) and the `given` arguments, a
    refusal of the source service shown on the page again, then the source's page.
    `page` is the confirmation's title, action, submit and explanation."""

    def act(data: dict[str, Any]) -> object:
        chosen = {argument: data[field] for argument, field in (fields or {}).items()}
        return service(
            source=source,
            actor=acting_user(request),
            reason=data["reason"],
            **chosen,
            **(given or {}),
        )

    return confirmed_action(
        request,
        form,
        act=_refusing(act),
        success=success,
        done_url=_source_url(source),
        page=lambda: _source_confirm_page(
            request, source, form, **(page() if callable(page) else page)
        ),
    )


def _source_switch(request: HttpRequest, source_id: int, *, enabled: bool) -> HttpResponse:
    source = get_object_or_404(Source, pk=source_id)
    verb = "Enable" if enabled else "Disable"
    if enabled:
        explanation = "Deliveries are accepted again from now on; senders that were told to "
        explanation += "retry deliver what they kept."
    elif source.profile in PRESETS:
        explanation = "Its hook answers every delivery 503 with Retry-After until it is "
        explanation += "enabled again: senders keep the submission and retry, nothing is stored."
    else:
        explanation = "Its API keys are refused (403) until it is enabled again; the sender "
        explanation += "must retry later."
    return _source_action(
        request,
        source,
        ReasonForm(request.POST if confirmed(request) else None),
        service=source_enable,
        given={"enabled": enabled},
        success=f"{source.name} {verb.lower()}d.",
        page={
            "title": f"{verb} {source.name}",
            "action": reverse(f"console:source-{verb.lower()}", args=[source.pk]),
            "submit": f"{verb} the source",
            "explanation": explanation,
        },
    )


@require_POST
@console_permission(CHANGE_SOURCE)
def source_disable(request: HttpRequest, source_id: int) -> HttpResponse:
    return _source_switch(request, source_id, enabled=False)


@require_POST
@console_permission(CHANGE_SOURCE)
def source_enable_view(request: HttpRequest, source_id: int) -> HttpResponse:
    return _source_switch(request, source_id, enabled=True)


@require_POST
@console_permission(CHANGE_SOURCE)
def source_settings_view(request: HttpRequest, source_id: int) -> HttpResponse:
    source = get_object_or_404(Source, pk=source_id)
    if confirmed(request):
        form = SourceSettingsForm(request.POST)
    else:
        form = SourceSettingsForm(
            initial={"thank_you_url": source.thank_you_url, "duplicates": source.duplicates}
        )
    return _source_action(
        request,
        source,
        form,
        service=source_settings_change,
        fields={"thank_you_url": "thank_you_url", "duplicates": "duplicates"},
        success=f"The settings of {source.name} were saved.",
        page={
            "title": f"Settings of {source.name}",
            "action": reverse("console:source-settings", args=[source.pk]),
            "submit": "Save the settings",
            "explanation": "The change applies to the next delivery and is written to the "
            "audit trail with its reason.",
        },
    )


@require_POST
@console_permission(CHANGE_SOURCE)
def source_secret_add_view(request: HttpRequest, source_id: int) -> HttpResponse:
    """Not `confirmed_action`: its success is a page, not a redirect and a message, so
    that the new secret travels in this one answer and is stored nowhere else."""
    source = get_object_or_404(Source, pk=source_id)
    form = SecretAddForm(request.POST if confirmed(request) else None)
    if form.is_bound and form.is_valid():
        typed = form.cleaned_data["secret"]
        try:
            added = source_secret_issue(
                source=source,
                actor=acting_user(request),
                reason=form.cleaned_data["reason"],
                secret=typed,
            )
        except InvalidProfileError as exc:
            form.add_error(None, str(exc))
        else:
            response = render(
                request,
                "review_console/sources/source_secret_added.html",
                {"source": source, "prefix": added.prefix, "secret": "" if typed else added.secret},
            )
            response["Cache-Control"] = "no-store"
            return response
    return _source_confirm_page(
        request,
        source,
        form,
        title=f"Add a signing secret to {source.name}",
        action=reverse("console:source-secret-add", args=[source.pk]),
        submit="Add the secret",
        explanation="Deliveries signed with any of the source's secrets verify, so the "
        "sender can move to the new one before the old one is removed. A generated secret "
        "is shown once, on the next page, and never again.",
    )


@require_POST
@console_permission(CHANGE_SOURCE)
def source_secret_remove_view(request: HttpRequest, source_id: int) -> HttpResponse:
    source = get_object_or_404(Source, pk=source_id)
    if confirmed(request):
        form = SecretRemoveForm(request.POST, source=source)
    else:
        form = SecretRemoveForm(
            initial={"secret_prefix": request.POST.get("secret_prefix", "")}, source=source
        )

    def page() -> dict[str, Any]:
        explanation = "Deliveries signed with it are refused (401) from now on."
        if source.secrets.count() <= 1:
            explanation += (
                " It is the source's only secret: every signed delivery will be refused until "
                "a new secret is added and the sender uses it."
            )
        return {
            "title": f"Remove a signing secret of {source.name}",
            "action": reverse("console:source-secret-remove", args=[source.pk]),
            "submit": "Remove the secret",
            "explanation": explanation,
        }

    return _source_action(
        request,
        source,
        form,
        service=source_secret_revoke,
        fields={"prefix": "secret_prefix"},
        success=lambda data, _: (
            f"The secret {data['secret_prefix']}… of {source.name} was removed."
        ),
        page=page,
    )


# -- The html profile's CAPTCHA (intake/senders/captcha.py) ----------------------------


class CaptchaForm(ReasonForm):
    field_order = ("provider", "secret", "reason")
    provider = forms.ChoiceField(
        required=False,
        label="CAPTCHA",
        choices=[("", "None")]
        + [(name, provider.label) for name, provider in CAPTCHA_PROVIDERS.items()],
    )
    secret = _secret_field(
        "Secret key",
        "The secret key from the provider's dashboard (not the site key). Leave "
        "empty to keep the stored one while the provider stays the same.",
    )


def captcha_of(source: Source) -> dict[str, str] | None:
    """What the page shows of the source's CAPTCHA: never its secret, only a prefix."""
    provider = CAPTCHA_PROVIDERS.get(source.captcha_provider)
    if provider is None:
        return None
    return {
        "label": provider.label,
        "field": provider.field,
        "prefix": source.captcha_secret[:CAPTCHA_SECRET_SHOWN],
    }


@require_POST
@console_permission(CHANGE_SOURCE)
def source_captcha_view(request: HttpRequest, source_id: int) -> HttpResponse:
    source = get_object_or_404(Source, pk=source_id)
    form = CaptchaForm(
        request.POST if confirmed(request) else None,
        initial={"provider": source.captcha_provider},
    )
    return _source_action(
        request,
        source,
        form,
        service=source_captcha_set,
        fields={"provider": "provider", "secret": "secret"},
        success=lambda data, _: (
            f"{source.name} now requires {CAPTCHA_PROVIDERS[data['provider']].label}."
            if data["provider"]
            else f"{source.name} no longer requires a CAPTCHA."
        ),
        page={
            "title": f"The CAPTCHA of {source.name}",
            "action": reverse("console:source-captcha", args=[source.pk]),
            "submit": "Save",
            "explanation": "With a CAPTCHA, a submission without a token the provider accepts "
            "is refused before anything is kept (the visitor sees why and can try again); when "
            "the provider cannot answer, the submission is kept and its confirmation email "
            "waits for a person. Put the provider's widget inside the form on the website "
            "first, or every visitor is refused.",
        },
    )
