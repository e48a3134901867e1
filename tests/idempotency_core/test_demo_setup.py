"""`manage.py demo_setup`: the quick start's demo credentials, shown once and renewable."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import RequestFactory

from idempotency_core.intake.sources import source_for_working_api_key
from review_console.permissions import REPLAY, VIEW_CASES, VIEW_CONTACT

pytestmark = pytest.mark.django_db


def demo_setup(*args: str) -> str:
    out = io.StringIO()
    call_command("demo_setup", *args, stdout=out)
    return out.getvalue()


def printed(output: str) -> tuple[str, str]:
    key = re.search(r"^KEY=(\S+)$", output, re.M)
    password = re.search(r"password: (\S+)$", output, re.M)
    assert key and password, output
    return key.group(1), password.group(1)


def signs_in(password: str) -> bool:
    request = RequestFactory().post("/accounts/login/")
    return authenticate(request, username="demo-admin", password=password) is not None


def test_credentials_are_printed_once_and_the_second_run_says_how_to_renew_them():
    key, password = printed(demo_setup())
    again = demo_setup()
    assert key not in again and password not in again
    assert "demo_setup --new-credentials" in again
    assert source_for_working_api_key(key) is not None and signs_in(password)


def test_new_credentials_replace_the_old_ones():
    old_key, old_password = printed(demo_setup())
    key, password = printed(demo_setup("--new-credentials"))
    assert source_for_working_api_key(old_key) is None  # no overlap: the old one is lost
    assert source_for_working_api_key(key) is not None
    assert signs_in(password) and not signs_in(old_password)


def test_the_demo_user_reviews_replays_and_sees_contact_details():
    demo_setup()
    user = User.objects.get(username="demo-admin")
    assert user.is_staff and not user.is_superuser
    assert all(user.has_perm(perm) for perm in (VIEW_CASES, REPLAY, VIEW_CONTACT))
