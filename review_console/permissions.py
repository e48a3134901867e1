"""Who may do what in the review console, for the HTML views and the staff API alike.

Roles are Django groups created by idempotency_core's migrations: Reviewers
(view and change cases, view the audit trail) and Replay admins (also replay).
Seeing unmasked contact details is its own permission. Non-staff users never
reach the console, whatever permissions they hold: `is_staff` is checked first.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import User
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

VIEW_CASES = "idempotency_core.view_reviewcase"
CHANGE_CASES = "idempotency_core.change_reviewcase"
VIEW_AUDIT = "idempotency_core.view_auditentry"
REPLAY = "idempotency_core.replay_operation"
VIEW_CONTACT = "idempotency_core.view_contact_details"
CHANGE_SOURCE = "idempotency_core.change_source"
# The Settings admins group: the business configuration's pages.
CHANGE_CONFIG = "idempotency_core.change_businessconfig"
VIEW_CONFIG_VERSIONS = "idempotency_core.view_businessconfigversion"
# A person's export and erasure (granted to no group by default: a privacy officer's).
ERASE_PERSONAL_DATA = "idempotency_core.erase_personal_data"


def console_allows(user: Any, perm: str) -> bool:
    """Staff, active, and holding `perm` (superusers hold every permission)."""
    return bool(user.is_authenticated and user.is_active and user.is_staff and user.has_perm(perm))


def may_try_again(user: Any, preview: dict[str, Any] | None) -> bool:
    """Whether the case page offers *Try again* to `user`: Replay admins wherever the
    replay rule allows it, anyone who may change cases where the engine proves it safe
    (`preview` is selectors.replay_preview's; review/replay.py holds the rule)."""
    if console_allows(user, REPLAY):
        return True
    return bool(preview and preview.get("proven_safe") and console_allows(user, CHANGE_CASES))


def console_permission(perm: str) -> Callable:
    """View decorator: anonymous users go to the login page, everyone else without
    the permission gets 403 (a redirect loop to the login page helps nobody who is
    already signed in)."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not console_allows(request.user, perm):
                raise PermissionDenied(
                    "The review console is for staff in the Reviewers or Replay admins group."
                )
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


class _ConsolePermission(BasePermission):
    perm = VIEW_CASES

    def has_permission(self, request: Request, view: APIView) -> bool:
        return console_allows(request.user, self.perm)


class CanViewCases(_ConsolePermission):
    perm = VIEW_CASES


class CanChangeCases(_ConsolePermission):
    perm = CHANGE_CASES


class CanReplay(_ConsolePermission):
    perm = REPLAY


def acting_user(request: HttpRequest | Request) -> User:
    """The signed-in person a console action is taken by (views are guarded by
    `console_permission` or DRF permissions first, so this only narrows the type)."""
    user = request.user
    if not isinstance(user, User) or not user.is_authenticated:
        raise PermissionDenied("Sign in first.")
    return user
