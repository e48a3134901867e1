"""Sign-in hardening: five wrong passwords in a row lock that username out for the
configured time (django-axes), on the console's login and the admin's alike, and
password reset is off unless configured.

Every request comes from 127.0.0.1, as it would from one proxy: the lockout is by
username, so another reviewer is unaffected.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.core import mail
from django.db.models import F
from django.test import Client
from django.utils.http import urlsafe_base64_encode

from tests.factories import PASSWORD, make_user

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"
LOCKED = 429


def attempt(client: Client, username: str, password: str, url: str = LOGIN) -> int:
    response = client.post(url, {"username": username, "password": password, "next": "/console/"})
    return response.status_code


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def lock_out(client: Client, username: str, url: str = LOGIN) -> None:
    """Five wrong passwords: four answered with the form again, the fifth locks."""
    assert [attempt(client, username, f"wrong-{n}", url) for n in range(5)] == [200] * 4 + [LOCKED]


def move_clock_back(delta: timedelta) -> None:
    """Makes the recorded failures `delta` older, as if that time had passed."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - delta)


def test_the_sixth_attempt_after_five_wrong_passwords_is_refused_even_with_the_right_one(
    client: Client,
) -> None:
    make_user("rita", groups=("Reviewers",))
    lock_out(client, "rita")

    assert attempt(client, "rita", "wrong-again") == LOCKED
    response = client.post(LOGIN, {"username": "rita", "password": PASSWORD})
    assert response.status_code == LOCKED
    assert not signed_in(client)
    page = response.content.decode()
    assert "Too many failed sign-ins" in page
    assert f"for {settings.AXES_COOLOFF_TIME.total_seconds() / 60:.0f} minutes" in page
    assert client.get("/console/").status_code == 302  # still sent to the login page


def test_thirty_wrong_passwords_then_the_right_one_does_not_get_in(client: Client) -> None:
    # The outside review's exact sequence.
    make_user("rita", groups=("Reviewers",))
    for n in range(30):
        attempt(client, "rita", f"guess-{n}")
    assert attempt(client, "rita", PASSWORD) == LOCKED
    assert not signed_in(client)


def test_another_user_from_the_same_address_is_not_affected(client: Client) -> None:
    make_user("rita", groups=("Reviewers",))
    make_user("rex", groups=("Replay admins",))
    lock_out(client, "rita")

    other = Client()  # same 127.0.0.1
    assert attempt(other, "rex", PASSWORD) == 302
    assert signed_in(other)
    assert other.get("/console/").status_code == 200


def test_the_lock_lifts_after_the_configured_time_and_not_before(client: Client) -> None:
    make_user("rita", groups=("Reviewers",))
    lock_out(client, "rita")
    cooloff = settings.AXES_COOLOFF_TIME
    assert cooloff == timedelta(minutes=15)  # ONEFOLD_LOGIN_LOCKOUT_MINUTES's default

    move_clock_back(cooloff - timedelta(minutes=1))
    assert attempt(client, "rita", PASSWORD) == LOCKED
    # That refused try counted as a failure and started the wait again.
    move_clock_back(cooloff - timedelta(seconds=5))
    assert attempt(client, "rita", PASSWORD) == LOCKED

    move_clock_back(cooloff + timedelta(seconds=1))
    assert attempt(client, "rita", PASSWORD) == 302
    assert signed_in(client)


def test_only_wrong_passwords_in_a_row_count(client: Client) -> None:
    make_user("rita", groups=("Reviewers",))
    for _ in range(4):
        assert attempt(client, "rita", "wrong") == 200
    assert attempt(client, "rita", PASSWORD) == 302  # a success starts the count again
    client.post("/accounts/logout/")
    for _ in range(4):
        assert attempt(client, "rita", "wrong") == 200
    assert attempt(client, "rita", PASSWORD) == 302


def test_the_admin_login_locks_out_the_same_way(client: Client) -> None:
    User.objects.create_superuser("sue", password=PASSWORD)
    lock_out(client, "sue", url=ADMIN_LOGIN)
    assert attempt(client, "sue", PASSWORD, url=ADMIN_LOGIN) == LOCKED
    assert not signed_in(client)
    # One count per username, whichever login page the guesses came through.
    assert attempt(client, "sue", PASSWORD, url=LOGIN) == LOCKED


def test_recorded_attempts_never_hold_the_password_tried(client: Client) -> None:
    # A wrong password is often a near miss of the right one.
    make_user("rita", groups=("Reviewers",))
    attempt(client, "rita", "correct-horse-batteyr")
    stored = AccessAttempt.objects.get(username="rita")
    assert "batteyr" not in stored.post_data
    assert stored.failures_since_start == 1


RESET_PAGES = [
    "/accounts/password_reset/",
    "/accounts/password_reset/done/",
    f"/accounts/reset/{urlsafe_base64_encode(b'1')}/set-password/",
    "/accounts/reset/done/",
]


@pytest.mark.parametrize("path", RESET_PAGES)
def test_password_reset_is_not_found_when_not_configured(client: Client, path: str) -> None:
    assert settings.ONEFOLD_PASSWORD_RESET is False  # the default
    assert client.get(path).status_code == 404


def test_a_reset_request_sends_no_mail_when_not_configured(client: Client) -> None:
    user = make_user("rita", groups=("Reviewers",))
    user.email = "rita@example.com"
    user.save()
    response = client.post("/accounts/password_reset/", {"email": "rita@example.com"})
    assert response.status_code == 404
    assert mail.outbox == []


def test_password_reset_answers_when_configured(client: Client, settings) -> None:
    settings.ONEFOLD_PASSWORD_RESET = True
    assert client.get("/accounts/password_reset/").status_code == 200


def test_the_admin_offers_no_password_reset_link(client: Client) -> None:
    page = client.get(ADMIN_LOGIN).content.decode()
    assert "password" in page.lower()  # the form itself
    assert "Forgotten your password" not in page
