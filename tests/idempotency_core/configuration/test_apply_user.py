"""`config apply --user NAME` names who applies the file: someone allowed to change the
configuration (change_businessconfig), as on the Settings pages; the operating-system
user who ran the command is kept in the audit entry too."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import AuditEntry, BusinessConfigVersion
from tests.factories import make_user

pytestmark = pytest.mark.django_db

FILE = 'sources:\n  website:\n    forms:\n      "*":\n        task: {title: "Call back"}\n'


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    source_get_or_create(name="website")
    path = tmp_path / "onefold.yaml"
    path.write_text(FILE)
    return path


def test_a_user_without_the_permission_is_refused_and_nothing_applied(config_file: Path) -> None:
    make_user("rev", groups=("Reviewers",))
    with pytest.raises(CommandError, match="may not change the configuration"):
        call_command("config", "apply", str(config_file), "--user", "rev")
    assert not BusinessConfigVersion.objects.exists()


def test_a_settings_admin_is_recorded_with_the_operating_system_user(config_file: Path) -> None:
    admin = make_user("sam", groups=("Settings admins",))
    call_command("config", "apply", str(config_file), "--user", "sam")
    version = BusinessConfigVersion.objects.get()
    assert version.created_by == admin
    entry = AuditEntry.objects.get(action="config_applied")
    assert entry.actor == admin
    assert entry.details["os_user"] == getpass.getuser()


def test_without_a_user_the_operating_system_user_is_recorded(config_file: Path) -> None:
    call_command("config", "apply", str(config_file))
    entry = AuditEntry.objects.get(action="config_applied")
    assert entry.details["os_user"] == getpass.getuser()
