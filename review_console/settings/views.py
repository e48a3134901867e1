"""The console's Settings pages: what each source's (and form's) effects contain.

For staff in the `Settings admins` group (`change_businessconfig`; superusers): the
sources and their configured blocks, one page per source and form, an editor per
section (the enquiry's and the contact's CRM properties, the task, the
confirmation) with a live preview from a real kept submission and a test sent to
oneself, and the version history with each version's changes and a restore.

Every write is a service of idempotency_core.configuration (`config_section_apply`,
`config_restore`: a new version, audited), the test a service of execution
(`config_test_send`, audited); the views parse, call and render. The preview is
rendered by `content_preview` under the unsaved draft and stores nothing
(config_edit.py). The business configuration is documented in
docs/configuration.md; these pages in docs/console.md, "Settings".
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from idempotency_core.configuration.document import ANY_FORM, SECTIONS
from idempotency_core.configuration.versions import (
    ConfigConflictError,
    ConfigInvalidError,
    ConfigVersionMissingError,
    config_changes,
    config_current,
    config_problems,
    config_restore,
    config_section_apply,
    config_with_section,
    document_ordered,
)
from idempotency_core.configuration.yamlfile import yaml_dump
from idempotency_core.execution.config_test import ConfigTestRefusedError, config_test_send
from idempotency_core.models import BusinessConfigVersion, Event, Source
from integrations.base import DestinationError
from review_console.forms import ReasonForm
from review_console.http import require_GET, require_POST
from review_console.permissions import (
    CHANGE_CONFIG,
    VIEW_CONFIG_VERSIONS,
    VIEW_CONTACT,
    acting_user,
    console_permission,
)
from review_console.settings.config_edit import (
    PREVIEW_STEPS,
    SECTION_LABELS,
    SPECS,
    DraftMarks,
    Preview,
    SectionForm,
    draft_problems_by_field,
    initial_of,
    kept_submissions,
    preview_render,
    problems_by_field,
    saved_section,
    section_prefix,
    submission_label,
)

VERSIONS_PER_PAGE = 50
# Forms a source received lately that no block names: offered as blocks to add.
RECENT_FORMS_SCANNED = 200
RECENT_FORMS_DAYS = 30


def _form_url(source: str, form: str) -> str | None:
    """The form's page, or None for a form name no URL can carry (one with a "/": it
    is edited in the file, `manage.py config apply`)."""
    try:
        return reverse("console:settings-form", args=[source, form])
    except NoReverseMatch:
        return None


def _recent_forms(source: Source) -> list[str]:
    # event_received_idx: the last days' events only, however many a source has.
    since = timezone.now() - timedelta(days=RECENT_FORMS_DAYS)
    forms = (
        Event.objects.filter(source=source, received_at__gte=since)
        .order_by("-received_at")
        .values_list("form", flat=True)[:RECENT_FORMS_SCANNED]
    )
    return sorted({form for form in forms if form})


# -- pages ---------------------------------------------------------------------------


@require_GET
@console_permission(CHANGE_CONFIG)
def settings_home(request: HttpRequest) -> HttpResponse:
    typed = (request.GET.get("form") or "").strip()
    if typed:  # "Open its block" of a form no block names yet
        url = _form_url(_source(request.GET.get("source") or "").name, typed)
        if url is not None:
            return redirect(url)
        messages.error(request, "A form whose name has a / is edited in the file (config apply).")
    current = config_current()
    document = document_ordered(current.document)
    rows = []
    for source in Source.objects.order_by("name").only("name", "is_active"):
        forms = ((document["sources"].get(source.name) or {}).get("forms")) or {}
        blocks = [
            {
                "form": form,
                "url": _form_url(source.name, form),
                "sections": [SECTION_LABELS[s] for s in SECTIONS if (block or {}).get(s)],
            }
            for form, block in forms.items()
        ]
        unnamed = [form for form in _recent_forms(source) if form not in forms]
        rows.append(
            {
                "source": source,
                "blocks": blocks,
                "any_url": None if ANY_FORM in forms else _form_url(source.name, ANY_FORM),
                "unnamed": [{"form": f, "url": _form_url(source.name, f)} for f in unnamed],
            }
        )
    latest = BusinessConfigVersion.objects.order_by("-number").first()
    return render(
        request,
        "review_console/settings/settings_home.html",
        {"rows": rows, "latest": latest, "any_form": ANY_FORM},
    )


def _source(name: str) -> Source:
    return get_object_or_404(Source.objects.only("id", "name", "task_assignee"), name=name)


@require_GET
@console_permission(CHANGE_CONFIG)
def settings_form(request: HttpRequest, source: str, form: str) -> HttpResponse:
    found = _source(source)
    current = config_current()
    sections = [
        {
            "key": section,
            "label": SECTION_LABELS[section],
            "values": yaml_dump(values) if values else "",
        }
        for section in SECTIONS
        for values in [saved_section(current.document, found.name, form, section)]
    ]
    return render(
        request,
        "review_console/settings/settings_form.html",
        {
            "source": found,
            "form_name": form,
            "any_form": form == ANY_FORM,
            "sections": sections,
            "version": current.number,
        },
    )


# -- the section editor --------------------------------------------------------------


def _section(section: str) -> str:
    if section not in SECTIONS:
        raise Http404("No such section of a form's block.")
    return section


@dataclass
class _Editing:
    """One section's editor as a request opened it: the source, form and section, the
    editor's form, the kept submissions it offers and the version it starts from."""

    request: HttpRequest
    source: Source
    form: str
    section: str
    editor: SectionForm
    events: list[Event]
    based_on: int


def _editor_form(
    request: HttpRequest, source: Source, form: str, section: str, *, bound: bool
) -> _Editing:
    """The editor's form (bound to the POST, or with the saved section), the kept
    submissions it offers, and the version it starts from."""
    current = config_current()
    based_on = current.number
    if bound:
        try:
            based_on = int(request.POST.get("based_on") or current.number)
        except ValueError:
            based_on = current.number
    saved_document = current.document
    if based_on != current.number:
        saved_document = (
            BusinessConfigVersion.objects.filter(number=based_on)
            .values_list("document", flat=True)
            .first()
        ) or {}
    saved = saved_section(saved_document, source.name, form, section)
    unmasked = request.user.has_perm(VIEW_CONTACT)
    chosen = request.POST.get("event", "") if bound else request.GET.get("event", "")
    if bound and chosen and getattr(request, "htmx", False):
        # As one types: the submission the page chose alone, read by its key.
        events = kept_submissions(source, form, current.document, pk=chosen)
    else:
        events = kept_submissions(source, form, current.document)
    choices = [(str(e.pk), submission_label(e, unmasked=unmasked)) for e in events]
    kwargs: dict[str, Any] = {"section": section, "saved": saved, "events": choices}
    if bound:
        editor = SectionForm(request.POST, **kwargs)
    else:
        # The newest unless another is asked for: each preview then names its own.
        newest = choices[0][0] if choices else ""
        initial = {
            **initial_of(section, saved),
            "based_on": based_on,
            "event": chosen if chosen in {c[0] for c in choices} else newest,
        }
        editor = SectionForm(initial=initial, **kwargs)
    return _Editing(request, source, form, section, editor, events, based_on)


def _preview_of(editing: _Editing, editor: SectionForm | None = None) -> dict[str, Any]:
    """The preview's context: the draft's problems, or what it renders from the
    chosen submission (the newest when none is chosen). `editor`: another form than
    the editing's own (the first page's, bound to what is saved)."""
    request, source, form, section = editing.request, editing.source, editing.form, editing.section
    editor = editor if editor is not None else editing.editor
    events = editing.events
    if not editor.is_valid():
        return {"problems": [f"{k}: {e}" for k, errors in editor.errors.items() for e in errors]}
    draft = editor.draft()
    labels = {spec.key: spec.label for spec in SPECS[section]}
    if draft.problems:
        found = draft_problems_by_field(draft.problems)
        return {"problems": [f"{labels[k]}: {e}" for k, errors in found.items() for e in errors]}
    current = config_current()
    document = config_with_section(
        current.document, source=source.name, form=form, section=section, values=draft.values
    )
    block = (document.get("sources") or {}).get(source.name) or {}
    prefix = section_prefix(source.name, form, section)
    problems = config_problems(
        {"sources": {source.name: block}}, marks=DraftMarks(prefix, draft.files)
    )
    if problems:
        by_field, others = problems_by_field(problems, prefix)
        return {
            "problems": [f"{labels[k]}: {e}" for k, errors in by_field.items() for e in errors]
            + others
        }
    chosen = editor.cleaned_data.get("event") or ""
    event = next((e for e in events if str(e.pk) == chosen), events[0] if events else None)
    if event is None:
        return {"no_submission": True}
    preview = preview_render(
        event=event,
        section=section,
        document=document,
        number=current.number + 1,
        unmasked=request.user.has_perm(VIEW_CONTACT),
    )
    return {"preview": preview, "event": event, "draft_values": draft.values}


def _editor_page(
    editing: _Editing, *, preview: dict[str, Any] | None = None, status: int = 200
) -> HttpResponse:
    if preview is None:
        preview = _preview_of(editing)
    request, section = editing.request, editing.section
    return render(
        request,
        "review_console/settings/settings_section.html",
        {
            "source": editing.source,
            "form_name": editing.form,
            "section": section,
            "label": SECTION_LABELS[section],
            "editor": editing.editor,
            "based_on": editing.based_on,
            "current": config_current().number,
            "step": PREVIEW_STEPS[section],
            "unmasked": request.user.has_perm(VIEW_CONTACT),
            "has_email": bool((getattr(request.user, "email", "") or "").strip()),
            **preview,
        },
        status=status,
    )


@require_GET
@console_permission(CHANGE_CONFIG)
def settings_section(request: HttpRequest, source: str, form: str, section: str) -> HttpResponse:
    found, section = _source(source), _section(section)
    editing = _editor_form(request, found, form, section, bound=False)
    editor = editing.editor
    # The first preview renders what is saved: the unbound form's initial values.
    values = {name: editor[name].value() for name in editor.fields}
    bound = SectionForm(
        {name: value for name, value in values.items() if value is not None},
        section=section,
        saved=editor.saved,
        events=editor.fields["event"].choices,  # type: ignore[attr-defined]
    )
    return _editor_page(editing, preview=_preview_of(editing, bound))


@require_POST
@console_permission(CHANGE_CONFIG)
def settings_preview(request: HttpRequest, source: str, form: str, section: str) -> HttpResponse:
    """What the draft renders; nothing is written. For htmx (the page's live preview,
    as one types) the preview's part alone; without scripts, the whole page."""
    found, section = _source(source), _section(section)
    editing = _editor_form(request, found, form, section, bound=True)
    preview = _preview_of(editing)
    if getattr(request, "htmx", False):
        return render(
            request,
            "review_console/settings/_settings_preview.html",
            {
                "section": section,
                "step": PREVIEW_STEPS[section],
                "unmasked": request.user.has_perm(VIEW_CONTACT),
                **preview,
            },
        )
    return _editor_page(editing, preview=preview)


@require_POST
@console_permission(CHANGE_CONFIG)
def settings_save(request: HttpRequest, source: str, form: str, section: str) -> HttpResponse:
    """The draft applied as a new version with its reason; on any problem, the page
    again with each problem at its field and nothing saved."""
    found, section = _source(source), _section(section)
    editing = _editor_form(request, found, form, section, bound=True)
    editor = editing.editor
    if not editor.is_valid():
        return _editor_page(editing, status=400)
    draft = editor.draft()
    for key, errors in draft_problems_by_field(draft.problems).items():
        for error in errors:
            editor.add_error(key, error)
    reason = editor.cleaned_data.get("reason") or ""
    if not reason:
        editor.add_error("reason", "Say why: it is kept with the version and in the audit trail.")
    if editor.errors:
        return _editor_page(editing, status=400)
    prefix = section_prefix(found.name, form, section)
    try:
        result = config_section_apply(
            source=found.name,
            form=form,
            section=section,
            values=draft.values,
            actor=acting_user(request),
            reason=reason,
            based_on=editing.based_on,
            marks=DraftMarks(prefix, draft.files),
        )
    except ConfigInvalidError as exc:
        by_field, others = problems_by_field(exc.problems, prefix)
        for key, errors in by_field.items():
            for error in errors:
                editor.add_error(key if key in editor.fields else None, error)
        for other in others:
            editor.add_error(None, f"Elsewhere in {found.name}'s configuration: {other}")
        return _editor_page(editing, status=400)
    except ConfigConflictError as exc:
        editor.add_error(None, str(exc))
        return _editor_page(editing, status=409)
    where = f"{SECTION_LABELS[section]} of {found.name} / {form}"
    if result.changed:
        messages.success(request, f"{where} saved as version {result.number}.")
    else:
        messages.info(request, f"{where}: nothing changed, so no new version was written.")
    return redirect(reverse("console:settings-form", args=[found.name, form]))


@require_POST
@console_permission(CHANGE_CONFIG)
def settings_test_send(request: HttpRequest, source: str, form: str, section: str) -> HttpResponse:
    """The confirmation the draft renders, sent to the signed-in person's own address;
    the editor again, with the draft as typed (nothing is saved)."""
    found = _source(source)
    if _section(section) != "confirmation":
        raise Http404("Only a confirmation can be sent as a test.")
    editing = _editor_form(request, found, form, section, bound=True)
    preview = _preview_of(editing)
    shown: Preview | None = preview.get("preview")
    if shown is None or shown.content is None:
        messages.error(request, "Nothing was sent: the draft cannot be rendered (see the preview).")
    else:
        try:
            config_test_send(
                source=found, form=form, content=shown.content, actor=acting_user(request)
            )
        except ConfigTestRefusedError as exc:
            messages.error(request, f"Nothing was sent. {exc}")
        except DestinationError as exc:
            messages.error(request, f"The mail service did not take the test: {exc.message}")
        else:
            messages.success(
                request,
                f"A test of this draft was sent to {acting_user(request).email} (not saved).",
            )
    return _editor_page(editing, preview=preview)


# -- versions ------------------------------------------------------------------------


@require_GET
@console_permission(VIEW_CONFIG_VERSIONS)
def settings_versions(request: HttpRequest) -> HttpResponse:
    page = Paginator(
        BusinessConfigVersion.objects.order_by("-number").select_related("created_by"),
        VERSIONS_PER_PAGE,
    ).get_page(request.GET.get("page"))
    versions = list(page.object_list)
    # Each version's predecessor, read at once: the oldest one's may be off the page.
    numbers = {v.number - 1 for v in versions} - {v.number for v in versions}
    documents = {v.number: v.document for v in versions}
    documents |= dict(
        BusinessConfigVersion.objects.filter(number__in=numbers).values_list("number", "document")
    )
    rows = []
    for version in versions:
        changes = list(config_changes(documents.get(version.number - 1) or {}, version.document))
        rows.append({"version": version, "changes": changes[:3], "more": len(changes) - 3})
    latest = BusinessConfigVersion.objects.order_by("-number").values_list("number", flat=True)
    return render(
        request,
        "review_console/settings/settings_versions.html",
        {"page": page, "rows": rows, "current": latest.first() or 0},
    )


def _version_page(
    request: HttpRequest, version: BusinessConfigVersion, form: ReasonForm, *, status: int = 200
) -> HttpResponse:
    previous = (
        BusinessConfigVersion.objects.filter(number=version.number - 1)
        .values_list("document", flat=True)
        .first()
    ) or {}
    current = config_current().number
    restore: list[str] = []
    refusal = ""
    if version.number != current:
        try:
            restore = config_restore(
                number=version.number, actor=acting_user(request), reason="", dry_run=True
            ).changes
        except ConfigInvalidError as exc:
            refusal = "; ".join(str(problem) for problem in exc.problems)
    return render(
        request,
        "review_console/settings/settings_version.html",
        {
            "version": version,
            "current": current,
            "changes": list(config_changes(previous, version.document)),
            "diff": _yaml_diff(previous, version.document, version.number),
            "document_yaml": yaml_dump(document_ordered(version.document)),
            "restore_changes": restore,
            "refusal": refusal,
            "form": form,
            "can_restore": request.user.has_perm(CHANGE_CONFIG),
        },
        status=status,
    )


def _yaml_diff(before: Mapping[str, Any], after: Mapping[str, Any], number: int) -> list[dict]:
    """The two documents' YAML, line by line, as a unified diff a person reads."""
    old = yaml_dump(document_ordered(before)).splitlines()
    new = yaml_dump(document_ordered(after)).splitlines()
    lines = difflib.unified_diff(
        old, new, f"version {number - 1}", f"version {number}", n=3, lineterm=""
    )
    kinds = {"+": "added", "-": "removed", "@": "where"}
    return [
        {"text": line, "kind": "" if line.startswith(("+++", "---")) else kinds.get(line[:1], "")}
        for line in lines
    ]


def _version(number: int) -> BusinessConfigVersion:
    return get_object_or_404(
        BusinessConfigVersion.objects.select_related("created_by"), number=number
    )


@require_GET
@console_permission(VIEW_CONFIG_VERSIONS)
def settings_version(request: HttpRequest, number: int) -> HttpResponse:
    return _version_page(request, _version(number), ReasonForm())


@require_POST
@console_permission(CHANGE_CONFIG)
def settings_restore(request: HttpRequest, number: int) -> HttpResponse:
    """The version's document as a new version, with the reason typed on its page."""
    version = _version(number)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        return _version_page(request, version, form, status=400)
    try:
        result = config_restore(
            number=number, actor=acting_user(request), reason=form.cleaned_data["reason"]
        )
    except ConfigInvalidError as exc:
        form.add_error(None, "; ".join(str(problem) for problem in exc.problems))
        return _version_page(request, version, form, status=400)
    except ConfigVersionMissingError as exc:
        raise Http404(str(exc)) from exc
    if result.changed:
        messages.success(request, f"Version {number} restored: it is now version {result.number}.")
    else:
        messages.info(request, f"Version {number} is what the configuration says already.")
    return redirect(reverse("console:settings-versions"))
