"""`POST /hooks/<source>/` (and `/hooks/<source>/t/<token>/`): the senders' own formats.

Plain Django views, not DRF: the body must be read raw (signatures are over the
bytes as received) and each sender is answered as it expects. CSRF does not
apply to this cross-site endpoint; the signature or the token does. Everything
the hook decides is in `intake.hooks.hook_receive`; the view counts the client's
address first (`intake.rate`), before any query, and answers a source that does not
exist, or has no hook, exactly as it answers a wrong credential.

drf-spectacular sees only DRF views: the public schema (/api/schema/) gets these
routes from `intake.api.hook_schema`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.contrib.staticfiles import finders
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from rest_framework.throttling import BaseThrottle

from idempotency_core.intake.hooks import HookAnswer, HookRequest, hook_receive, hook_refused
from idempotency_core.intake.rate import address_rate_wait
from idempotency_core.intake.senders.profiles import PRESETS
from idempotency_core.intake.senders.verifying import token_verify
from idempotency_core.models import Source


def client_address(request: HttpRequest) -> str:
    """The client's address by DRF's rule (REST_FRAMEWORK["NUM_PROXIES"], set from
    ONEFOLD_TRUSTED_PROXIES): REMOTE_ADDR, or behind N proxies the address the
    nearest of them appended to X-Forwarded-For."""
    return str(BaseThrottle().get_ident(request) or "")  # type: ignore[arg-type]


def _hooked_source(source_name: str) -> Source | None:
    """The source, if it has a hook (a profile other than `api`)."""
    source = Source.objects.filter(name=source_name).first()
    if source is None or source.profile not in PRESETS:
        return None
    return source


@csrf_exempt
@require_POST
def hook(request: HttpRequest, source_name: str, token: str = "") -> HttpResponse:
    wait = address_rate_wait(client_address(request))
    if wait is not None:
        return _json(
            HookAnswer(
                429,
                {"code": "throttled", "detail": "Too many requests from this address."},
                {"Retry-After": str(max(1, round(wait)))},
            )
        )
    source = _hooked_source(source_name)
    if source is None:
        return _json(hook_refused())
    answer = hook_receive(
        source=source,
        request=HookRequest(
            body=request.body,
            # The whole header: a multipart body needs its boundary parameter.
            content_type=request.META.get("CONTENT_TYPE", ""),
            headers=request.headers,
            method=request.method or "POST",
            url=request.build_absolute_uri(),
            path_token=token,
            wants_html="text/html" in request.headers.get("Accept", ""),
            client_address=client_address(request),
        ),
    )
    if answer.redirect_to:
        return HttpResponseRedirect(answer.redirect_to, status=303)
    if answer.page:
        context = {**answer.body, "back": _form_page(request)}
        return render(request, answer.page, context, status=answer.status)
    return _json(answer)


def _json(answer: HookAnswer) -> JsonResponse:
    response = JsonResponse(answer.body, status=answer.status)
    for name, value in answer.headers.items():
        response[name] = value
    return response


def _form_page(request: HttpRequest) -> str:
    """Where the browser came from (the form), for a link back; "" when it is not an
    http(s) URL (a browser may send only the site's origin, or nothing)."""
    referer = request.headers.get("Referer", "")
    try:
        parts = urlsplit(referer)
    except ValueError:
        return ""
    return referer if parts.scheme in ("http", "https") and parts.netloc else ""


@require_GET
def form_script(request: HttpRequest, source_name: str, token: str = "") -> HttpResponse:
    """The html profile's form.js, at that hook's own path (its token included). Any
    other source, a wrong token, or none, gets one and the same 404: the script
    tells no one which sources exist."""
    source = _hooked_source(source_name)
    if (
        source is None
        or source.profile != "html"
        or not token_verify(token, digest=source.hook_token_digest).ok
    ):
        return HttpResponse("Not found.\n", status=404, content_type="text/plain")
    path = finders.find("onefold/form.js")
    if not isinstance(path, str):
        return HttpResponse("Not found.\n", status=404, content_type="text/plain")
    with open(path, "rb") as script:
        response = HttpResponse(script.read(), content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = "public, max-age=300"
    return response
