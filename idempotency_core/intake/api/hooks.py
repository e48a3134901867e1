"""`POST /hooks/<source>/` (and `/hooks/<source>/t/<token>/`): the senders' own formats.

Plain Django views, not DRF: the body must be read raw (signatures are over the
bytes as received) and each sender is answered as it expects. CSRF does not
apply to this cross-site endpoint; the signature or the token does. Everything
the hook decides is in `intake.hooks.hook_receive`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.contrib.staticfiles import finders
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import get_object_or_404, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from idempotency_core.intake.hooks import HookRequest, hook_receive
from idempotency_core.intake.rate import source_rate_wait
from idempotency_core.intake.senders.profiles import API, PRESETS
from idempotency_core.models import Source


def _hooked_source(source_name: str) -> Source:
    """The source, if it has a hook (a profile other than `api`); else 404."""
    source = get_object_or_404(Source, name=source_name)
    if source.profile == API or source.profile not in PRESETS:
        raise Http404("This source has no hook.")
    return source


@csrf_exempt
@require_POST
def hook(request: HttpRequest, source_name: str, token: str = "") -> HttpResponse:
    source = _hooked_source(source_name)
    wait = source_rate_wait(source)
    if wait is not None:
        response = JsonResponse(
            {"code": "throttled", "detail": "Too many deliveries; retry later."}, status=429
        )
        response["Retry-After"] = str(max(1, round(wait)))
        return response
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
            client_address=request.META.get("REMOTE_ADDR", ""),
        ),
    )
    if answer.redirect_to:
        return HttpResponseRedirect(answer.redirect_to, status=303)
    if answer.page:
        context = {**answer.body, "back": _form_page(request)}
        return render(request, answer.page, context, status=answer.status)
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
    """The html profile's form.js (it needs nothing of the source but that it exists)."""
    _hooked_source(source_name)
    path = finders.find("onefold/form.js")
    if not isinstance(path, str):
        raise Http404("form.js is missing from the static files")
    with open(path, "rb") as script:
        response = HttpResponse(script.read(), content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = "public, max-age=300"
    return response
