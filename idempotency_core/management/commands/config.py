"""`manage.py config export [--source NAME]` and `manage.py config apply FILE [--dry-run]`."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Any, NoReturn

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_core.configuration.document import Problem
from idempotency_core.configuration.versions import (
    config_apply,
    config_current,
    config_export,
    config_problems,
)
from idempotency_core.configuration.yamlfile import (
    MAX_BYTES,
    YamlFileError,
    yaml_dump,
    yaml_load,
)

CHANGE_CONFIG = "idempotency_core.change_businessconfig"


class Command(BaseCommand):
    help = (
        "The business configuration as YAML: `export [--source NAME]` prints it; "
        "`apply FILE [--dry-run]` validates the whole file (exit 1 naming each problem "
        "with its line, nothing applied), then applies it as one new version."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        export = actions.add_parser("export", help="Print the current configuration as YAML.")
        export.add_argument("--source", help="Only this source's block.")
        apply = actions.add_parser("apply", help="Validate FILE, then apply it as a new version.")
        apply.add_argument("file", help="The YAML file ('-' reads standard input).")
        apply.add_argument("--dry-run", action="store_true", help="Validate and show changes.")
        apply.add_argument("--reason", default="", help="Why (kept with the version and audit).")
        apply.add_argument("--user", default="", help="The staff user applying it (username).")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "export":
            self._export(options.get("source"))
        else:
            self._apply(
                options["file"],
                dry_run=options["dry_run"],
                reason=options["reason"],
                username=options["user"],
            )

    def _export(self, source: str | None) -> None:
        version = config_current()
        self.stdout.write(f"# Onefold business configuration, version {version.number}")
        self.stdout.write(yaml_dump(config_export(source=source)), ending="")

    def _apply(self, file: str, *, dry_run: bool, reason: str, username: str) -> None:
        actor = _actor(username)
        text = sys.stdin.read(MAX_BYTES + 1) if file == "-" else _read(file)
        try:
            document, marks, problems = yaml_load(text)
        except YamlFileError as exc:
            self._refuse(file, [exc.problem])
        if document is None:  # an empty file: nothing named, nothing changed
            document = {}
        problems += config_problems(document, marks=marks)
        if problems:
            self._refuse(file, problems)
        os_user = _os_user()
        result = config_apply(
            document=document,
            actor=actor,
            reason=reason or f"config apply {Path(file).name} (by {os_user})",
            dry_run=dry_run,
            marks=marks,
            audit_details={"os_user": os_user},
        )
        for change in result.changes:
            self.stdout.write(f"  {change}")
        if not result.changed:
            self.stdout.write("No change: the configuration already says this.")
        elif dry_run:
            self.stdout.write(
                f"Dry run: valid; {len(result.changes)} change(s) would be version "
                f"{result.number}. Nothing applied."
            )
        else:
            self.stdout.write(f"Applied as version {result.number}.")

    def _refuse(self, file: str, problems: list[Problem]) -> NoReturn:
        ordered = sorted(problems, key=lambda p: (p.line is None, p.line or 0))
        for problem in ordered:
            self.stderr.write(f"{file}: {problem}")
        raise CommandError(f"{len(problems)} problem(s) in {file}; nothing applied.")


def _read(file: str) -> str:
    try:
        if Path(file).stat().st_size > MAX_BYTES:
            raise CommandError(f"{file} is larger than 1 MiB; nothing applied.")
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"Cannot read {file}: {exc}") from exc


def _actor(username: str) -> User | None:
    if not username:
        return None
    user = User.objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(f"No active user {username!r}.")
    if not user.has_perm(CHANGE_CONFIG):
        raise CommandError(
            f"{username!r} may not change the configuration (change_businessconfig, the "
            "Settings admins group); nothing applied."
        )
    return user


def _os_user() -> str:
    """Who ran the command on this machine, kept with the version's audit entry."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"
