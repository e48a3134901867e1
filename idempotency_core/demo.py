"""The quick start's demo source and staff user (`demo_setup`, `run_stack`)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from axes.utils import reset as axes_reset
from django.contrib.auth.models import Group, Permission, User
from django.db import transaction

from idempotency_core.intake.sources import source_api_key_rotate, source_create_with_key
from idempotency_core.models import Source

DEMO_SOURCE = "demo-website"
DEMO_USER = "demo-admin"
# The console's two roles, and the contact details unmasked: the demo's data is the
# demo user's own, and a newcomer should see what a reviewer with that right sees.
DEMO_GROUPS = ("Reviewers", "Replay admins")
DEMO_PERMISSIONS = ("view_contact_details",)


@dataclass(frozen=True)
class DemoCredentials:
    username: str
    source: str
    # In clear when made by this call; None when they already existed (they were
    # shown when made and are not kept).
    password: str | None
    api_key: str | None


@transaction.atomic
def demo_setup(*, new_credentials: bool = False) -> DemoCredentials:
    """Creates the demo source and staff user if absent. With `new_credentials`, also
    gives existing ones a new API key (the old keys stop working at once) and a new
    password (lifting a sign-in lockout)."""
    api_key = None
    if not Source.objects.filter(name=DEMO_SOURCE).exists():
        _, _, api_key = source_create_with_key(name=DEMO_SOURCE)
    elif new_credentials:
        api_key = source_api_key_rotate(name=DEMO_SOURCE, overlap=timedelta(0)).key
    password = None
    user = User.objects.filter(username=DEMO_USER).first()
    if user is None:
        password = secrets.token_urlsafe(12)
        user = User.objects.create_user(DEMO_USER, password=password, is_staff=True)
    elif new_credentials:
        password = secrets.token_urlsafe(12)
        user.set_password(password)
        user.is_active = user.is_staff = True
        user.save(update_fields=["password", "is_active", "is_staff"])
        axes_reset(username=DEMO_USER)
    user.groups.add(*Group.objects.filter(name__in=DEMO_GROUPS))
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="idempotency_core", codename__in=DEMO_PERMISSIONS
        )
    )
    return DemoCredentials(
        username=DEMO_USER, source=DEMO_SOURCE, password=password, api_key=api_key
    )
