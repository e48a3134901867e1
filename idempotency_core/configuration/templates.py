"""The configuration's templates: Django's template language, sandboxed to the values given."""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from django.template import Context, Engine, Template, TemplateSyntaxError

from idempotency_core.configuration.template_limits import (
    RenderLimitError,
    bounded,
    html_problem,
    render_bounds,
    rendered_html_problem,
    tree_problem,
)

LIBRARY = "idempotency_core.configuration.template_library"
# Longest template the configuration accepts: a confirmation's HTML fits easily.
MAX_TEMPLATE_LENGTH = 50_000


class _SandboxEngine(Engine):
    """An engine whose builtins are only the ones it is given: Django's Engine adds
    its default tags, filters and loader tags to any list it is handed."""

    default_builtins: ClassVar[list[str]] = []


def _engine(*, debug: bool) -> Engine:
    return _SandboxEngine(
        dirs=[],
        app_dirs=False,
        loaders=[],
        libraries={},
        builtins=[LIBRARY],
        string_if_invalid="",
        autoescape=True,
        debug=debug,
    )


_ON_LINE = re.compile(r" on line \d+")
# Rendering: no debug bookkeeping. Checking: debug, which records where an error is.
_RENDER = _engine(debug=False)
_CHECK = _engine(debug=True)


class TemplateRenderError(Exception):
    """A template that compiled but could not be rendered with these values (a filter
    given an argument it cannot use): the content cannot be made."""


@dataclass(frozen=True)
class TemplateProblem:
    """Why a template cannot be used, and the line of the template where it is (1 on)."""

    message: str
    line: int


def template_problem(source: str, *, html: bool = False) -> TemplateProblem | None:
    """What is wrong with `source` as a template, or None: a syntax error, an unknown
    or forbidden tag or filter, work beyond the limits of template_limits.py, and in
    the HTML email (`html`) a value where the mail client would fetch or follow it;
    with its line in the template."""
    if len(source) > MAX_TEMPLATE_LENGTH:
        return TemplateProblem(f"longer than {MAX_TEMPLATE_LENGTH} characters", 1)
    try:
        template = Template(source, engine=_CHECK)
    except TemplateSyntaxError as exc:
        debug = getattr(exc, "template_debug", None) or {}
        return TemplateProblem(_said(exc), int(debug.get("line") or 1))
    except RecursionError:
        return TemplateProblem("tags nested too deeply", 1)
    limit = tree_problem(template) or (html_problem(source) if html else None)
    if limit is not None:
        return TemplateProblem(limit.message, limit.line)
    return None


def _said(exc: TemplateSyntaxError) -> str:
    """Django's message, with the hint it adds for a tag that a `{% load %}` would
    register, which is no help where nothing can be loaded."""
    message = str(exc).split(". Did you forget to register or load", 1)[0]
    message = _ON_LINE.sub("", message)  # the line is given on its own
    if message.startswith("Invalid block tag"):
        message += " (not available in configuration templates)"
    return message


@lru_cache(maxsize=4096)
def _compiled(source: str) -> Template:
    """Compiled, checked (a version stored before a limit existed is held to it too)
    and counted against the render's budget."""
    try:
        template = Template(source, engine=_RENDER)
    except RecursionError as exc:
        raise TemplateRenderError("tags nested too deeply") from exc
    limit = tree_problem(template)
    if limit is not None:
        raise TemplateRenderError(f"template line {limit.line}: {limit.message}")
    return bounded(template)


def template_values(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """`values` as templates see them: mappings read-only, lists as tuples, all the way
    down (a payload's `fields` may nest)."""
    return _frozen(values)  # type: ignore[no-any-return]


# What `_frozen` gives back as it is, tested by exact type before the abstract Mapping
# check, which is the slow one: a render's values are mostly these.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _frozen(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Mapping):
        return types.MappingProxyType({str(k): _frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def template_render(source: str, values: Mapping[str, Any], *, html: bool = False) -> str:
    """`source` rendered over `values` (from `template_values`); autoescaped when `html`.
    Raises TemplateSyntaxError for a template that does not compile (the configuration's
    validation refuses those first) and TemplateRenderError when rendering fails or
    goes past its bounds (inside `render_bounds`, the budget of the whole content), or
    when the HTML made would have the mail client fetch or follow what the template's
    text does not write."""
    if not source:
        return ""
    template = _compiled(source)
    try:
        with render_bounds():
            rendered = str(template.render(Context(dict(values), autoescape=html)))
    except RenderLimitError as exc:
        raise TemplateRenderError(str(exc)) from exc
    except Exception as exc:
        raise TemplateRenderError(f"{type(exc).__name__}: {exc}") from exc
    problem = rendered_html_problem(source, rendered) if html else ""
    if problem:
        raise TemplateRenderError(problem)
    return rendered
