"""The routes of one object's pages, as the rooms declare them: a table of views by
name (`case-<what>`, `source-<what>`), each at the object's path and then `<what>/`."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from django.http import HttpResponseBase
from django.urls import URLPattern, path


def one_object_routes(
    base: str, views: Mapping[str, Callable[..., HttpResponseBase]], paths: Mapping[str, str]
) -> list[URLPattern]:
    """Each view of `views` at `base` (as "cases/<int:case_id>/") and then its name with
    its first word taken off ("case-reopen": "reopen/"), or at `paths`' entry for its
    name where the path is not the name (its slashes, another word)."""
    return [
        path(f"{base}{paths.get(name, name.split('-', 1)[1])}/", view, name=name)
        for name, view in views.items()
    ]
