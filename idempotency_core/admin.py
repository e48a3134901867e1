"""The Django admin for sources and their deliveries (docs/senders.md).

A source's settings are edited here as on the console's source page: enabled or
not, default form, thank-you URL, duplicates policy, signing secrets. A secret is
write-only: typed into a new row, never shown again (its prefix identifies it).
Each change of the enabled flag and each secret added or removed is audited like
the console's. Sources are created with `manage.py create_source` (it issues the
key salt and the hook's credentials), so the admin neither adds nor deletes them.
Deliveries are read-only evidence, and their raw body is never shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from idempotency_core.intake.sources import (
    SECRET_MIN_LENGTH,
    InvalidProfileError,
    source_audit,
    source_secret_add,
    thank_you_url_check,
)
from idempotency_core.models import Delivery, Source, SourceSecret

if TYPE_CHECKING:
    SourceAdminBase = admin.ModelAdmin[Source]
    SecretInlineBase = admin.TabularInline[SourceSecret, Source]
    DeliveryAdminBase = admin.ModelAdmin[Delivery]
    SourceFormBase = forms.ModelForm[Source]
    SecretFormBase = forms.ModelForm[SourceSecret]
    SecretFormSetBase = BaseInlineFormSet[SourceSecret, Source, forms.ModelForm[SourceSecret]]
else:
    SourceAdminBase = DeliveryAdminBase = admin.ModelAdmin
    SecretInlineBase = admin.TabularInline
    SourceFormBase = SecretFormBase = forms.ModelForm
    SecretFormSetBase = BaseInlineFormSet

ADMIN_REASON = "Changed in the Django admin."


def _actor(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User):  # the admin is behind its login
        raise PermissionError("The admin acts for a signed-in user.")
    return user


def _audit(request: HttpRequest, source: Source, action: str, **details: Any) -> None:
    source_audit(source, action, actor=_actor(request), reason=ADMIN_REASON, **details)


class SourceSecretForm(SecretFormBase):
    """A new row takes a secret; an existing row shows nothing of it (the password
    widget renders no value, and the field is disabled so nothing can change it)."""

    secret = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="At least 32 characters; shown nowhere after saving.",
    )

    class Meta:
        model = SourceSecret
        fields = ("secret",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["secret"].disabled = True

    def clean_secret(self) -> str:
        if self.instance.pk is not None:
            return self.instance.secret
        secret: str = self.cleaned_data.get("secret", "")
        if self.has_changed() and len(secret) < SECRET_MIN_LENGTH:
            raise forms.ValidationError(
                f"A signing secret needs at least {SECRET_MIN_LENGTH} characters."
            )
        return secret


class SourceSecretFormSet(SecretFormSetBase):
    def clean(self) -> None:
        """New secrets must not share a prefix with a kept one: removal is by prefix."""
        super().clean()
        kept = {
            form.instance.prefix
            for form in self.initial_forms
            if not form.cleaned_data.get("DELETE")
        }
        for form in self.extra_forms:
            secret = form.cleaned_data.get("secret", "") if form.has_changed() else ""
            if not secret:
                continue
            if secret[:6] in kept:
                form.add_error("secret", f"Another secret starts with {secret[:6]}.")
            kept.add(secret[:6])


class SourceSecretInline(SecretInlineBase):
    model = SourceSecret
    form = SourceSecretForm
    formset = SourceSecretFormSet
    fields = ("prefix", "secret", "created_at")
    readonly_fields = ("prefix", "created_at")
    extra = 1

    def get_queryset(self, request: HttpRequest) -> QuerySet[SourceSecret]:
        return super().get_queryset(request).order_by("created_at")


class SourceForm(SourceFormBase):
    # Not a URLField: it would complete `//evil.example/x` with a scheme, where the
    # one rule of `thank_you_url_check` refuses it.
    thank_you_url = forms.CharField(
        required=False,
        max_length=500,
        help_text="Where the html profile sends the browser after a submission (303): an "
        "absolute https:// URL (http:// only on localhost).",
    )
    duplicates = forms.ChoiceField(
        choices=[
            ("flag", "flag: both processed, a case offers a merge"),
            ("hold", "hold: the later one waits for a person before its CRM write"),
        ]
    )

    def clean_thank_you_url(self) -> str:
        try:
            return thank_you_url_check(self.cleaned_data.get("thank_you_url") or "")
        except InvalidProfileError as exc:
            raise forms.ValidationError(str(exc)) from exc

    class Meta:
        model = Source
        fields = (
            "is_active",
            "default_form",
            "thank_you_url",
            "duplicates",
            "rate_per_minute",
            "task_assignee",
            "crm",
            "mailer",
        )


@admin.register(Source)
class SourceAdmin(SourceAdminBase):
    form = SourceForm
    inlines = (SourceSecretInline,)
    list_display = ("name", "profile", "is_active", "default_form", "duplicates", "created_at")
    list_filter = ("is_active", "profile")
    search_fields = ("name",)
    readonly_fields = ("name", "profile", "profile_overrides", "hook_token", "pipelines")
    fieldsets = (
        (None, {"fields": ("name", "is_active", "profile", "hook_token")}),
        (
            "Settings",
            {"fields": ("default_form", "thank_you_url", "duplicates", "rate_per_minute")},
        ),
        ("Destinations and pipeline", {"fields": ("task_assignee", "crm", "mailer", "pipelines")}),
        ("Profile overrides", {"fields": ("profile_overrides",), "classes": ("collapse",)}),
    )

    @admin.display(description="Hook token")
    def hook_token(self, source: Source) -> str:
        if not source.hook_token_digest:
            return "none (a signing profile, or the JSON API)"
        return "set (only its digest is kept; the token was shown once, at creation)"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # manage.py create_source issues the salt and the hook's credentials

    def has_delete_permission(self, request: HttpRequest, obj: Source | None = None) -> bool:
        return False  # disable instead: events and deliveries keep referring to it

    def save_model(self, request: HttpRequest, obj: Source, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and "is_active" in form.changed_data:
            _audit(request, obj, "source_enabled" if obj.is_active else "source_disabled")

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is not SourceSecret:
            super().save_formset(request, form, formset, change)
            return
        source: Source = form.instance
        added = formset.save(commit=False)  # fills deleted_objects
        for secret in formset.deleted_objects:
            secret.delete()
            _audit(request, source, "source_secret_removed", prefix=secret.prefix)
        for secret in added:
            if secret.pk is None:
                created = source_secret_add(source=source, secret=secret.secret)
                _audit(request, source, "source_secret_added", prefix=created.prefix)


@admin.register(Delivery)
class DeliveryAdmin(DeliveryAdminBase):
    """Read-only: what each receipt was, never what it carried."""

    list_display = (
        "received_at",
        "source",
        "outcome",
        "status_code",
        "verification",
        "receipts",
        "event_ref",
    )
    list_filter = ("outcome", "source")
    list_select_related = ("source",)
    date_hierarchy = "received_at"
    exclude = ("raw_body",)
    readonly_fields = (
        "source",
        "event_ref",
        "received_at",
        "outcome",
        "status_code",
        "verification",
        "receipts",
        "content_type",
        "fingerprint",
        "payload_matched",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).defer("raw_body")

    @admin.display(description="Event")
    def event_ref(self, delivery: Delivery) -> str | None:
        """The event's id only: showing the event itself would read its payload."""
        return str(delivery.event_id) if delivery.event_id else None

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Delivery | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Delivery | None = None) -> bool:
        return False
