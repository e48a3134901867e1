"""The field-map editor on a source's page (Settings admins: `change_source`).

It shows the field tree of the source's last kept deliveries (values masked unless
the viewer may see contact details), lets an admin pick which field is the name (or
first and last name), the email address, the phone number, the message and which
become extra fields, and previews what the map makes of each kept delivery, saying
which would still be unreadable. Nothing is written until the map is saved as a new
version (`intake.sources.source_field_map_set`, audited); applying it to the
unreadable deliveries that wait is a confirmed action of its own, which runs the
same service as `manage.py remap` (`intake.remap.events_remap`): each one the map
now reads runs as an ordinary submission under its original key.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from idempotency_core.intake.remap import events_remap, unreadable_waiting
from idempotency_core.intake.senders.profiles import Profile, profile_resolve
from idempotency_core.intake.sources import InvalidProfileError, source_field_map_set
from idempotency_core.models import Event, Source
from review_console.confirm import confirmed, confirmed_action
from review_console.forms import ReasonForm
from review_console.http import require_GET, require_POST
from review_console.permissions import CHANGE_SOURCE, VIEW_CONTACT, acting_user, console_permission
from review_console.sources.field_tree import KeptDelivery, Leaf, field_tree, kept_deliveries

# A target's choice: leave the map's current expression, or read nothing.
KEEP, NOTHING = "", "-"
TARGETS = ("email", "phone", "message")
# Saving and applying is one decision; its reason is preset (a person may change it).
DEFAULT_REASON = "Read the form's fields as the form names them"


class FieldMapForm(forms.Form):
    """One choice per target among the field tree's paths (their JSON expressions)."""

    name = forms.ChoiceField(required=False, label="Name (one field)")
    name_first = forms.ChoiceField(required=False, label="First name")
    name_last = forms.ChoiceField(required=False, label="Last name")
    email = forms.ChoiceField(required=False, label="Email address")
    phone = forms.ChoiceField(required=False, label="Phone number")
    message = forms.ChoiceField(required=False, label="Message")
    extras = forms.MultipleChoiceField(
        required=False, label="Extra fields", widget=forms.CheckboxSelectMultiple
    )
    reason = forms.CharField(
        required=False,
        strip=True,
        label="Reason (kept with the decision)",
        initial=DEFAULT_REASON,
    )

    def __init__(self, *args: Any, paths: list[Leaf], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        options = [(leaf.expression, leaf.shown) for leaf in paths]
        for name in ("name", *TARGETS):
            keep = [(KEEP, "Keep as the map reads it now"), (NOTHING, "Nothing")]
            self._choices(name, [*keep, *options])
        for name in ("name_first", "name_last"):
            self._choices(name, [(KEEP, "Not in two parts"), *options])
        self._choices("extras", options)

    def _choices(self, name: str, choices: list[tuple[str, str]]) -> None:
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)  # MultipleChoiceField is one too
        field.choices = choices

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if bool(data.get("name_first")) != bool(data.get("name_last")):
            raise forms.ValidationError("Pick both the first and the last name, or neither.")
        return data


def field_map_from(data: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """The source's new field map (what `profile_overrides["field_map"]` holds): the
    current one with each target picked replaced."""
    chosen = dict(current)
    for target in ("name", *TARGETS):
        pick = data.get(target, KEEP)
        if pick != KEEP:
            chosen[target] = "" if pick == NOTHING else json.loads(pick)
    if data.get("name_first") and data.get("name_last"):
        parts = [json.loads(data["name_first"]), json.loads(data["name_last"])]
        chosen["name"] = {"concat": parts}
    if data.get("extras"):
        paths = [json.loads(pick) for pick in data["extras"]]
        chosen["extras"] = {"object": _labelled(paths)}
    return chosen


def _labelled(paths: list[list[Any]]) -> dict[str, list[Any]]:
    """Each extra field under its last key (`q4_subject`), or its whole path where two
    would share one."""
    lasts = [str(path[-1]) for path in paths]
    return {
        (last if lasts.count(last) == 1 else ".".join(map(str, path))): path
        for last, path in zip(lasts, paths, strict=True)
    }


def _initial(current: dict[str, Any], paths: list[Leaf]) -> dict[str, Any]:
    """The current map's picks where they are plain paths of the tree."""
    known = {leaf.expression for leaf in paths}

    def pick(expression: Any) -> str:
        as_json = (
            json.dumps(expression, ensure_ascii=False, separators=(",", ":"))
            if isinstance(expression, list)
            else ""
        )
        return as_json if as_json in known else KEEP

    initial: dict[str, Any] = {target: pick(current.get(target)) for target in ("name", *TARGETS)}
    name = current.get("name")
    if isinstance(name, dict) and isinstance(name.get("concat"), list) and len(name["concat"]) == 2:
        initial["name_first"], initial["name_last"] = map(pick, name["concat"])
    extras = current.get("extras")
    if isinstance(extras, dict) and isinstance(extras.get("object"), dict):
        initial["extras"] = [pick(path) for path in extras["object"].values() if pick(path)]
    return initial


def _waiting(source: Source) -> int:
    return Event.objects.filter(unreadable_waiting(), source=source).count()


def _editor(
    request: HttpRequest,
    source: Source,
    *,
    form: FieldMapForm | None = None,
    preview: list[KeptDelivery] | None = None,
    candidate: dict[str, Any] | None = None,
    status: int = 200,
) -> HttpResponse:
    profile = _profile(source)
    unmasked = request.user.has_perm(VIEW_CONTACT)
    current = kept_deliveries(source, profile, unmasked=unmasked)
    paths = field_tree(current)
    current_map = (source.profile_overrides or {}).get("field_map") or {}
    if form is None:
        initial = {**_initial(current_map, paths), "reason": DEFAULT_REASON}
        form = FieldMapForm(initial=initial, paths=paths)
    shown = preview if preview is not None else current
    return render(
        request,
        "review_console/sources/source_field_map.html",
        {
            "source": source,
            "profile": profile,
            "form": form,
            "paths": paths,
            "deliveries": shown,
            "previewing": preview is not None,
            "still_unreadable": sum(1 for d in shown if d.waiting and not d.readable),
            "readable_waiting": sum(1 for d in shown if d.waiting and d.readable),
            "waiting": _waiting(source),
            "current_map": json.dumps(current_map, indent=2, ensure_ascii=False),
            "candidate_map": json.dumps(candidate, indent=2, ensure_ascii=False)
            if candidate is not None
            else "",
            "unmasked": unmasked,
        },
        status=status,
    )


def _profile(source: Source, overrides: dict[str, Any] | None = None) -> Profile:
    return profile_resolve(
        source.profile, source.profile_overrides if overrides is None else overrides
    )


def _hooked(source_id: int) -> Source:
    """The source, if it has a hook whose profile its overrides still fit; else 404
    (a JSON-API source has no field map)."""
    source = get_object_or_404(Source, pk=source_id)
    try:
        _profile(source)
    except (KeyError, ValueError, TypeError):
        raise Http404("This source has no field map to edit.") from None
    return source


@require_GET
@console_permission(CHANGE_SOURCE)
def source_field_map(request: HttpRequest, source_id: int) -> HttpResponse:
    return _editor(request, _hooked(source_id))


def _posted(request: HttpRequest, source: Source) -> tuple[FieldMapForm, dict[str, Any] | None]:
    """The posted form and the map it makes (None when the form is invalid)."""
    profile = _profile(source)
    paths = field_tree(
        kept_deliveries(source, profile, unmasked=request.user.has_perm(VIEW_CONTACT))
    )
    form = FieldMapForm(request.POST, paths=paths)
    if not form.is_valid():
        return form, None
    current = (source.profile_overrides or {}).get("field_map") or {}
    return form, field_map_from(form.cleaned_data, current)


@require_POST
@console_permission(CHANGE_SOURCE)
def source_field_map_preview(request: HttpRequest, source_id: int) -> HttpResponse:
    """What the picked map makes of each kept delivery; nothing is written."""
    source = _hooked(source_id)
    form, candidate = _posted(request, source)
    if candidate is None:
        return _editor(request, source, form=form, status=400)
    overrides = {**(source.profile_overrides or {}), "field_map": candidate}
    try:
        profile = _profile(source, overrides)
    except (ValueError, TypeError) as exc:
        form.add_error(None, f"This map cannot be applied: {exc}")
        return _editor(request, source, form=form, status=400)
    preview = kept_deliveries(source, profile, unmasked=request.user.has_perm(VIEW_CONTACT))
    return _editor(request, source, form=form, preview=preview, candidate=candidate)


@require_POST
@console_permission(CHANGE_SOURCE)
def source_field_map_save(request: HttpRequest, source_id: int) -> HttpResponse:
    source = _hooked(source_id)
    form, candidate = _posted(request, source)
    if candidate is None:
        return _editor(request, source, form=form, status=400)
    try:
        version = source_field_map_set(
            source=source,
            actor=acting_user(request),
            field_map=candidate,
            reason=form.cleaned_data.get("reason", ""),
        )
    except InvalidProfileError as exc:
        form.add_error(None, str(exc))
        return _editor(request, source, form=form, candidate=candidate, status=400)
    if request.POST.get("apply"):
        # The map just picked is the one saved and applied: one decision, one reason.
        _apply(request, source, form.cleaned_data.get("reason") or DEFAULT_REASON, version)
        return redirect(reverse("console:source-field-map", args=[source.pk]))
    waiting = _waiting(source)
    messages.success(
        request,
        f"How the fields of {source.name} are read is saved (version {version}); every "
        "submission from now on is read so."
        + (
            f" {waiting} unreadable submission{' waits' if waiting == 1 else 's wait'} for "
            "it: apply it to them below."
            if waiting
            else ""
        ),
    )
    return redirect(reverse("console:source-field-map", args=[source.pk]))


@require_POST
@console_permission(CHANGE_SOURCE)
def source_field_map_apply(request: HttpRequest, source_id: int) -> HttpResponse:
    """The saved map applied to the unreadable deliveries that wait: confirmed, with a
    reason; each the map reads is processed under its original key (remap's rules)."""
    source = _hooked(source_id)
    form = ReasonForm(request.POST if confirmed(request) else None)

    def page() -> HttpResponse:
        waiting = _waiting(source)
        return render(
            request,
            "review_console/sources/source_confirm.html",
            {
                "source": source,
                "form": form,
                "title": f"Read the {waiting} waiting submission{'' if waiting == 1 else 's'} "
                f"of {source.name} with the saved choices",
                "action": reverse("console:source-field-map-apply", args=[source.pk]),
                "submit": "Apply the map",
                "explanation": "Each waiting submission whose fields the saved choices now read "
                "becomes an ordinary one under its original key: its enquiry, task and "
                "confirmation run as for any other, and its case is resolved. The ones it "
                "still cannot read keep waiting. Applying it again changes nothing.",
            },
        )

    # `_apply` says what it did (how many are now read), so no fixed success message.
    return confirmed_action(
        request,
        form,
        act=lambda data: _apply(request, source, data["reason"]),
        done_url=reverse("console:source-field-map", args=[source.pk]),
        page=page,
    )


def _apply(request: HttpRequest, source: Source, reason: str, version: int | None = None) -> None:
    """The saved map applied to the waiting unreadable deliveries (remap's service), and
    what it did, in a message."""
    processed = still = 0
    for change in events_remap(
        source=source,
        since=None,
        dry_run=False,
        unreadable_only=True,
        actor=acting_user(request),
        reason=reason,
    ):
        if change.admitted or change.repeat_of:
            processed += 1
        elif change.error:
            still += 1
    saved = f"The map of {source.name} is saved (version {version}). " if version else ""
    one = processed == 1
    messages.success(
        request,
        f"{saved}{processed} waiting submission{'' if one else 's'} {'is' if one else 'are'} "
        f"now read and on {'its' if one else 'their'} way to the CRM; {still} still unreadable.",
    )
