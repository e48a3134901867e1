"""Method guards of the console's views that answer a wrong method with the styled
405 page (templates/405.html) instead of Django's empty body, with its `Allow`."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails


def require_methods(*methods: str) -> Callable:
    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                response = render(request, "405.html", {"allowed": methods}, status=405)
                response["Allow"] = ", ".join(methods)
                return response
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


require_GET = require_methods("GET")
require_POST = require_methods("POST")


class HtmxHttpRequest(HttpRequest):
    """A request that went through django-htmx's middleware (django-htmx's own typing
    recipe): `request.htmx` says whether htmx sent it."""

    htmx: HtmxDetails


def querystring(request: HttpRequest, *, drop: tuple[str, ...] = ("after", "before")) -> str:
    params = request.GET.copy()
    for key in drop:
        params.pop(key, None)
    return params.urlencode()
