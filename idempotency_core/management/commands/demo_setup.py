"""`manage.py demo_setup`: the quick start's demo source and staff user, created once.

Credentials are printed only when created; later runs say they exist.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand

from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Source

DEMO_SOURCE = "demo-website"
DEMO_USER = "demo-admin"


class Command(BaseCommand):
    help = "Create the demo source and a staff user if absent, printing their credentials once."

    def handle(self, *args: Any, **options: Any) -> None:
        if Source.objects.filter(name=DEMO_SOURCE).exists():
            self.stdout.write(f"Demo source {DEMO_SOURCE!r} exists (its key was printed once).")
        else:
            _, _, key = source_create_with_key(name=DEMO_SOURCE)
            self.stdout.write(self.style.SUCCESS(f"Demo source {DEMO_SOURCE!r} API key: {key}"))
        User = get_user_model()
        if User.objects.filter(username=DEMO_USER).exists():
            self.stdout.write(f"Staff user {DEMO_USER!r} exists (its password was printed once).")
            return
        password = secrets.token_urlsafe(12)
        user = User.objects.create_user(DEMO_USER, password=password, is_staff=True)
        user.groups.add(*Group.objects.filter(name__in=["Reviewers", "Replay admins"]))
        self.stdout.write(
            self.style.SUCCESS(
                f"Staff user {DEMO_USER!r} password: {password} (console: /console/)"
            )
        )
