"""Versions: every change a new version with who and why, audited, never updated in
place; export and apply make the round trip; `--dry-run` says what would change."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import IntegrityError, InternalError, ProgrammingError, transaction

from idempotency_core.configuration.versions import config_apply, config_current
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import AuditEntry, BusinessConfigVersion
from tests.factories import configured, make_user

pytestmark = pytest.mark.django_db

TASK = {"*": {"task": {"title": "Call {{ contact.name }}", "assignee": "ana"}}}


def test_an_apply_is_one_new_version_with_who_why_and_its_audit_entry() -> None:
    source_get_or_create(name="website")
    admin = make_user("settings-admin", groups=("Settings admins",))
    result = config_apply(
        document={"sources": {"website": {"forms": TASK}}}, actor=admin, reason="new titles"
    )
    version = BusinessConfigVersion.objects.get()
    assert (result.number, version.number) == (1, 1)
    assert (version.created_by, version.actor_label, version.reason) == (
        admin,
        "user:settings-admin",
        "new titles",
    )
    entry = AuditEntry.objects.get(action="config_applied")
    assert entry.actor == admin and entry.reason == "new titles"
    assert entry.details["version"] == 1
    assert "sources.website.forms.*.task.title added" in entry.details["changes"]
    assert config_current().number == 1


def test_a_change_is_a_new_version_and_the_old_one_stays_as_it_was() -> None:
    configured(TASK)
    configured({"*": {"task": {"title": "Ring {{ contact.name }}"}}})
    first, second = BusinessConfigVersion.objects.order_by("number")
    assert first.document["sources"]["website"]["forms"]["*"]["task"]["assignee"] == "ana"
    assert second.document["sources"]["website"]["forms"]["*"]["task"] == {
        "title": "Ring {{ contact.name }}"
    }
    assert config_current().number == 2


def test_versions_are_append_only_in_the_database() -> None:
    configured(TASK)
    with pytest.raises((InternalError, ProgrammingError)), transaction.atomic():
        BusinessConfigVersion.objects.update(reason="rewritten")
    with pytest.raises((InternalError, ProgrammingError)), transaction.atomic():
        BusinessConfigVersion.objects.all().delete()
    with pytest.raises(IntegrityError), transaction.atomic():
        BusinessConfigVersion.objects.create(number=1, document={}, actor_label="system:x")


def test_an_apply_that_changes_nothing_writes_no_version() -> None:
    configured(TASK)
    result = configured(TASK)
    assert not result.changed
    assert BusinessConfigVersion.objects.count() == 1


def test_a_source_not_named_keeps_its_configuration() -> None:
    configured(TASK, source="website")
    configured({"*": {"confirmation": {"send": False}}}, source="shop")
    document = config_current().document
    assert set(document["sources"]) == {"website", "shop"}


def test_export_then_apply_is_no_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configured(
        {
            "*": {
                "confirmation": {"text": "Hello {{ contact.name }},\n\nThanks.\n", "send": True},
                "task": {"assignee": {"round_robin": ["ana", "ben"]}, "due_in_hours": 24},
            },
            "newsletter": {"confirmation": {"send": False}},
        }
    )
    call_command("config", "export")
    exported = capsys.readouterr().out
    assert "text: |" in exported  # multi-line templates stay readable
    assert exported.index("newsletter") < exported.index("'*'")
    path = tmp_path / "exported.yaml"
    path.write_text(exported)
    call_command("config", "apply", str(path))
    assert "No change" in capsys.readouterr().out
    assert BusinessConfigVersion.objects.count() == 1


def test_a_dry_run_says_what_would_change_and_applies_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configured(TASK)
    path = tmp_path / "change.yaml"
    path.write_text(
        'sources:\n  website:\n    forms:\n      "*":\n        task:\n'
        "          title: Ring {{ contact.name }}\n"
    )
    call_command("config", "apply", str(path), "--dry-run")
    out = capsys.readouterr().out
    assert "sources.website.forms.*.task.title changed" in out
    assert "sources.website.forms.*.task.assignee removed" in out
    assert "would be version 2. Nothing applied." in out
    assert BusinessConfigVersion.objects.count() == 1
    call_command("config", "apply", str(path), "--reason", "shorter titles")
    assert BusinessConfigVersion.objects.get(number=2).reason == "shorter titles"


def test_export_of_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    configured(TASK, source="website")
    configured({"*": {"confirmation": {"send": False}}}, source="shop")
    call_command("config", "export", "--source", "shop")
    out = capsys.readouterr().out
    assert "shop:" in out and "website" not in out
