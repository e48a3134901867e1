"""What a configuration template may do beyond its syntax: bounded work, no clock, and
in an HTML email no value where the mail client would fetch or link it.

Checked on the compiled template (`tree_problem`), so every place a value or a filter
can appear is seen (`{{ }}`, `{% if %}`, `{% for %}`, `{% with %}`, `{% firstof %}`...):

- a size a filter takes (`ljust`, `stringformat`, `floatformat`, `truncatechars`...) is
  a number written in the template, at most `MAX_SIZE`: a visitor's value cannot
  choose it, and `ljust:300000000` cannot fill the memory of the process;
- loops nest at most `MAX_LOOP_DEPTH` deep: each level multiplies the work;
- `with` blocks nest at most `MAX_WITH_DEPTH` deep: each level can double a value
  (`{% with b=a|add:a %}`);
- no lookup reaches the clock (`submitted_at.now`): what a template gives depends on
  the submission, never on the moment of rendering.

In the HTML email (`html_problem`), a template value inside an attribute that loads or
links (`src`, `href`, `style`...), in a `<style>` or `<script>` element, or naming a
tag or an attribute, is refused: the mail client would send it to whoever serves that
URL. So are comments and other declarations but a doctype (parsers disagree on where
a comment ends, `<!-->` and `--!>` end one in a browser, and Outlook reads the markup
inside `<!--[if mso]>`), and markup in a quoted string (Django never escapes one). The
markup is read as a browser's tokenizer reads it (`_markup`). The email rendered is
held to the same rule (`rendered_html_problem`): what it has the mail client fetch or
follow must be written in the template's text.

Rendering is bounded too (`render_bounds`): a template that passes these checks
still stops, refused, past `MAX_OUTPUT` characters written or `MAX_RENDER_SECONDS`,
and past a value built longer than `MAX_VALUE` or values built longer than
`MAX_BUILT` together (each filter's result, kept or not), counted over one
operation's content. How big a value grows depends on the submission (`add`
doubles the message), so that is measured as it renders: the memory a render takes
stays a bounded multiple of those sizes, whatever the template.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

from django.template import Template
from django.template.base import FilterExpression, Lexer, Node, NodeList, TokenType, Variable
from django.template.defaulttags import ForNode, IfNode, WithNode
from django.template.smartif import TokenBase

from idempotency_core.configuration.template_library import register

MAX_SIZE = 1000
MAX_LOOP_DEPTH = 2
MAX_WITH_DEPTH = 4
# One operation's content, all its templates together.
MAX_OUTPUT = 500_000
# A value a filter makes (characters, and one for each item of a list), and all of them
# together over one operation's content: what rendering can hold in memory at once.
MAX_VALUE = MAX_OUTPUT
MAX_BUILT = 4 * MAX_OUTPUT
MAX_RENDER_SECONDS = 2.0
# Filters whose argument is a width, a length, a precision or a format.
SIZED_FILTERS = frozenset(
    {
        "center",
        "floatformat",
        "get_digit",
        "join",
        "ljust",
        "rjust",
        "slice",
        "stringformat",
        "truncatechars",
        "truncatechars_html",
        "truncatewords",
        "truncatewords_html",
        "wordwrap",
    }
)
# Lookups that read the clock (a datetime's class methods, callable without arguments).
CLOCK = frozenset({"now", "today", "utcnow"})
# Attributes whose value a mail client fetches or follows, and elements whose every
# attribute does (a refresh, a stylesheet, a base URL).
LOADING_ATTRIBUTES = frozenset(
    {
        "action",
        "archive",
        "background",
        "cite",
        "classid",
        "codebase",
        "data",
        "dynsrc",
        "formaction",
        "href",
        "icon",
        "imagesrcset",
        "longdesc",
        "lowsrc",
        "manifest",
        "ping",
        "poster",
        "profile",
        "src",
        "srcset",
        "style",
        "usemap",
        "xlink:href",
    }
)
LOADING_ELEMENTS = frozenset({"base", "link", "meta"})
_FILTER_NAMES = {function: name for name, function in register.filters.items()}
_NUMBER = re.compile(r"\d+")


class LimitError(Exception):
    """What a template does beyond its limits, at `line` of the template (1 on)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def tree_problem(template: Template) -> LimitError | None:
    """The first thing `template` does beyond the limits of the module docstring."""
    for node, loops, withs in _nodes(template.nodelist, 0, 0):
        line = _line_of(node)
        if isinstance(node, ForNode) and loops > MAX_LOOP_DEPTH:
            return LimitError(f"loops nested more than {MAX_LOOP_DEPTH} deep", line)
        if isinstance(node, WithNode) and withs > MAX_WITH_DEPTH:
            return LimitError(f"with blocks nested more than {MAX_WITH_DEPTH} deep", line)
        for expression in _expressions(vars(node)):
            said = _expression_problem(expression)
            if said:
                return LimitError(said, line)
    return None


def _line_of(node: Node) -> int:
    token = getattr(node, "token", None)
    return int(getattr(token, "lineno", None) or 1)


def _children(node: Node) -> Iterator[NodeList]:
    if isinstance(node, IfNode):
        for _, nodelist in node.conditions_nodelists:
            yield nodelist
        return
    for attribute in node.child_nodelists:
        child = getattr(node, attribute, None)
        if child:
            yield child


def _nodes(nodelist: NodeList, loops: int, withs: int) -> Iterator[tuple[Node, int, int]]:
    """Each node, with the number of loops and of `with` blocks it is (a ForNode or a
    WithNode: it and those of its kind around it)."""
    for node in nodelist:
        in_loops = loops + 1 if isinstance(node, ForNode) else loops
        in_withs = withs + 1 if isinstance(node, WithNode) else withs
        yield node, in_loops, in_withs
        for child in _children(node):
            yield from _nodes(child, in_loops, in_withs)


def _expressions(value: Any) -> Iterator[FilterExpression]:
    """The filter expressions a node holds: its own attributes, the lists and mappings
    among them (`firstof`, `with`), and an `if`'s conditions however long (`a or b or
    ...` nests one level an operand, so this walks without recursing); not its child
    nodes."""
    pending = [value]
    seen: set[int] = set()
    while pending:
        value = pending.pop()
        if isinstance(value, FilterExpression):
            yield value
        elif isinstance(value, Node | NodeList | str) or id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            pending.extend(reversed(value.values()))
        elif isinstance(value, list | tuple):
            pending.extend(reversed(value))
        elif isinstance(value, TokenBase):
            pending.extend(getattr(value, name, None) for name in ("value", "second", "first"))


def _expression_problem(expression: FilterExpression) -> str:
    said = _clock_problem(expression.var)
    for function, arguments in expression.filters:
        name = _FILTER_NAMES.get(function, getattr(function, "__name__", ""))
        for lookup, argument in arguments:
            said = said or (_clock_problem(argument) if lookup else "")
            if name in SIZED_FILTERS:
                said = said or _size_problem(name, argument, lookup=lookup)
    return said


def _clock_problem(value: object) -> str:
    lookups = value.lookups if isinstance(value, Variable) else None
    for part in lookups or ():
        if str(part).lower() in CLOCK:
            return (
                f"{'.'.join(lookups or ())}: the moment of rendering is not available "
                "(submitted_at gives the submission's time)"
            )
    return ""


def _size_problem(name: str, argument: object, *, lookup: bool) -> str:
    if lookup and isinstance(argument, Variable) and argument.lookups is None:
        argument, lookup = argument.literal, False  # a number written unquoted
    if lookup:
        return f"{name}: the size must be written in the template, not taken from a value"
    text = str(argument)
    if name == "join":
        too_big = len(text) > MAX_SIZE
    else:
        too_big = any(
            len(run.lstrip("0")) > 4 or int(run) > MAX_SIZE for run in _NUMBER.findall(text)
        )
    if too_big:
        return f"{name}: a size over {MAX_SIZE} characters"
    return ""


# -- the HTML email ----------------------------------------------------------------------

_MARK = re.compile("\ue000(\\d+)\ue001")
_TAG_FROM_VALUE = re.compile("<\\s*/?\\s*\ue000")
# Where HTML parsers part ways: a comment (`<!-->` and `--!>` end one for a browser, not
# for every parser; Outlook reads the markup inside `<!--[if mso]>`), a CDATA
# section, a declaration, a processing instruction, `</` not closing a tag. Refused
# outright, so what the check reads as markup is what a mail client reads.
_DECLARATION = re.compile(r"<[!?]|</(?![a-zA-Z])")
# The one declaration allowed: a doctype, its identifiers quoted, nothing ambiguous in it.
_DOCTYPE = re.compile(
    r"""<!doctype\s+html(?:\s+(?:public|system)(?:\s+"[^"<>]*"|\s+'[^'<>]*'){1,2})?\s*>""",
    re.IGNORECASE,
)
# A quoted string in a tag or a filter: Django marks it safe, so it is never escaped.
_QUOTED = re.compile(r""""[^"]*"|'[^']*'""")
DECLARATION_SAID = (
    "an HTML comment or declaration (<!-- -->, <!--[if mso]>, <![CDATA[, <?, </ ): mail "
    "clients read where it ends and what is inside differently; write none "
    "({# #} is a note that is never sent)"
)


def html_problem(source: str) -> LimitError | None:
    """A template value (`{{ }}` or a tag's output) where the mail client would fetch
    or follow it, markup that mail clients and this check could read differently, or
    markup in a quoted string; with its line in the template."""
    skeleton, lines = _skeleton(source)
    named = _TAG_FROM_VALUE.search(skeleton)
    if named is not None:
        mark = _MARK.search(skeleton, named.start())
        return LimitError("a tag named by a template value", _mark_line(mark, lines))
    declaration = _declaration(skeleton)
    if declaration is not None:
        return LimitError(DECLARATION_SAID, _line_at(skeleton, declaration, lines))
    for token in Lexer(source).tokenize():
        if token.token_type in (TokenType.VAR, TokenType.BLOCK) and any(
            "<" in quoted.group() for quoted in _QUOTED.finditer(token.contents)
        ):
            return LimitError(
                "markup in a quoted string: Django never escapes a quoted string; "
                "write markup in the template's text",
                int(token.lineno or 1),
            )
    found = _loading(skeleton)
    if found is None:
        return None
    where, text = found
    return LimitError(
        f"a template value in {where}: the mail client would send it to that address",
        _mark_line(_MARK.search(text), lines),
    )


def rendered_html_problem(source: str, rendered: str) -> str:
    """What `rendered`, the HTML email made from the template `source`, holds that the
    mail client would fetch or follow and that the template's own text does not
    write, or markup parsers read differently; "" when nothing. The check of the
    template (`html_problem`) keeps values out of those places; this holds the email
    itself to it whatever put it there (a quoted string, a version stored before the
    rule)."""
    if _declaration(rendered) is not None:
        return DECLARATION_SAID
    written = _written(source)
    for tag, name, value in _fetched(rendered):
        if (tag, name, value) not in written:
            where = f"<{tag}>" if not name else f'<{tag} {name}="{value[:60]}">'
            return (
                f"{where} in the rendered HTML is not written in the template's text: "
                "the mail client would fetch or follow it"
            )
    return ""


def _skeleton(source: str) -> tuple[str, list[int]]:
    """`source` with each value and tag replaced by a mark (its number in `lines`, the
    line of each), and without what is never rendered (`{# #}`, `{% comment %}`)."""
    lines: list[int] = []
    parts = []
    commented = False
    for token in Lexer(source).tokenize():
        word = token.contents.split(maxsplit=1)[0] if token.contents.strip() else ""
        if token.token_type == TokenType.BLOCK and word in ("comment", "endcomment"):
            commented = word == "comment"
        elif commented or token.token_type == TokenType.COMMENT:
            continue
        elif token.token_type == TokenType.TEXT:
            parts.append(token.contents)
        else:
            parts.append(f"\ue000{len(lines)}\ue001")
            lines.append(int(token.lineno or 1))
    return "".join(parts), lines


def _declaration(html: str) -> int | None:
    """Where `html` has markup parsers read differently (`_DECLARATION`), if anywhere."""
    for found in _DECLARATION.finditer(html):
        if not _DOCTYPE.match(html, found.start()):
            return found.start()
    return None


def _mark_line(mark: re.Match[str] | None, lines: list[int]) -> int:
    return lines[int(mark.group(1))] if mark is not None else 1


def _line_at(skeleton: str, position: int, lines: list[int]) -> int:
    """The template's line of `position` in `skeleton`: the line of the last mark
    before it (a value or a tag, on one line), and the lines of text since."""
    before = skeleton[:position]
    earlier = [*_MARK.finditer(before)][-1:]
    if not earlier:
        return 1 + before.count("\n")
    return lines[int(earlier[0].group(1))] + before[earlier[0].end() :].count("\n")


@functools.lru_cache(maxsize=1024)
def _written(source: str) -> frozenset[tuple[str, str, str]]:
    return frozenset(_fetched(_skeleton(source)[0]))


def _fetched(html: str) -> list[tuple[str, str, str]]:
    """What a mail client fetches or follows in `html`: (tag, attribute, value) for
    each such attribute, and (tag, "", text) for the text of `<style>` and `<script>`."""
    fetched = []
    for tag, attributes, text in _markup(html):
        if text is not None:
            fetched.append((tag, "", text))
        for name, value in attributes:
            if name in LOADING_ATTRIBUTES or tag in LOADING_ELEMENTS:
                fetched.append((tag, name, value))
    return fetched


def _loading(skeleton: str) -> tuple[str, str] | None:
    """The first place in `skeleton` where a mark (a template value) would be fetched
    or followed, or names an attribute: where, and the text holding the mark."""
    for tag, attributes, text in _markup(skeleton):
        if text is not None and _MARK.search(text):
            return f"<{tag}>", text
        for name, value in attributes:
            if _MARK.search(name):
                return f"an attribute's name in <{tag}>", name
            if _MARK.search(value) and (name in LOADING_ATTRIBUTES or tag in LOADING_ELEMENTS):
                return f'<{tag} {name}="...">', value
    return None


# HTML's tokenizer (the HTML Living Standard's, which browsers and mail clients
# follow) for what matters here: start tags and their attributes, and the raw text of
# `<style>` and `<script>`. Written out, not Python's HTMLParser, whose tolerant
# parsing reads some tags otherwise and takes time quadratic in a run of unclosed
# tags. Comments and declarations are refused before (`_declaration`); elements a
# browser reads as text (`<title>`, `<textarea>`...) are read as markup, which finds
# more, never less.
_SPACE = "\t\n\f\r "
_TAG = re.compile(r"<(/?)([a-zA-Z][^\t\n\f\r />]*)")
_ATTRIBUTE_NAME = re.compile(r"[^\t\n\f\r />][^\t\n\f\r />=]*")
_UNQUOTED = re.compile(r"[^\t\n\f\r >]*")
_RAW_TEXT = {
    tag: re.compile(rf"</{tag}[\t\n\f\r />]", re.IGNORECASE) for tag in ("script", "style")
}


def _markup(html: str) -> Iterator[tuple[str, list[tuple[str, str]], str | None]]:
    """Each start tag of `html` as (tag, attributes, None), names lowercased, values
    as written; after a `<style>` or `<script>`, (tag, [], its text). A tag the text
    ends inside is no tag (as in a browser)."""
    position = 0
    while (found := _TAG.search(html, position)) is not None:
        attributes, position = _attributes(html, found.end())
        if position < 0:
            return
        tag = found.group(2).lower()
        if found.group(1):
            continue  # an end tag: its attributes are read only to find its end
        yield tag, attributes, None
        if tag in _RAW_TEXT:
            closing = _RAW_TEXT[tag].search(html, position)
            end = closing.start() if closing is not None else len(html)
            yield tag, [], html[position:end]
            position = end


def _attributes(html: str, at: int) -> tuple[list[tuple[str, str]], int]:
    """The attributes of the tag whose name ends at `at`, and where the tag ends (-1:
    not before the text does)."""
    attributes: list[tuple[str, str]] = []
    size = len(html)
    while True:
        while at < size and html[at] in _SPACE + "/":
            at += 1
        if at >= size:
            return attributes, -1
        if html[at] == ">":
            return attributes, at + 1
        name = cast(re.Match[str], _ATTRIBUTE_NAME.match(html, at))
        at = name.end()
        while at < size and html[at] in _SPACE:
            at += 1
        value = ""
        if at < size and html[at] == "=":
            at += 1
            while at < size and html[at] in _SPACE:
                at += 1
            if at >= size:
                return attributes, -1
            if html[at] in "\"'":
                end = html.find(html[at], at + 1)
                if end < 0:
                    return attributes, -1
                value, at = html[at + 1 : end], end + 1
            else:
                unquoted = cast(re.Match[str], _UNQUOTED.match(html, at))
                value, at = unquoted.group(), unquoted.end()
        attributes.append((name.group().lower(), value))


# -- bounded rendering ---------------------------------------------------------------


@dataclass
class _Budget:
    deadline: float
    left: int
    # What filters may still build (MAX_BUILT at first).
    to_build: int = MAX_BUILT

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise RenderLimitError(f"rendering took more than {MAX_RENDER_SECONDS:g} seconds")

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise RenderLimitError(f"the rendered text is longer than {MAX_OUTPUT} characters")

    def fits(self, size: int) -> None:
        """Raises unless a value of `size` may be built now."""
        if size > MAX_VALUE:
            raise RenderLimitError(f"a value built is longer than {MAX_VALUE} characters")
        if size > self.to_build:
            raise RenderLimitError(
                f"the values built come to more than {MAX_BUILT} characters together"
            )

    def build(self, size: int) -> None:
        self.fits(size)
        self.to_build -= size


class RenderLimitError(Exception):
    """Rendering went past its bounds of output, size or time: the content is not made."""


_BUDGET: ContextVar[_Budget | None] = ContextVar("onefold_render_budget", default=None)


@contextmanager
def render_bounds() -> Iterator[None]:
    """One budget of output and time for every template rendered inside (one
    operation's content); inside another, that one's budget goes on."""
    if _BUDGET.get() is not None:
        yield
        return
    token = _BUDGET.set(_Budget(time.monotonic() + MAX_RENDER_SECONDS, MAX_OUTPUT))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def bounded(template: Template) -> Template:
    """`template` made to count what it renders against the current budget: each node
    that writes text spends its length, each node and each loop's turn checks the
    time (a loop over a long value with an empty body writes nothing), and each
    filter counts the value it makes."""
    for node, _, _ in _nodes(template.nodelist, 0, 0):
        if isinstance(node, ForNode):
            node.nodelist_loop = _TimedNodeList(cast(NodeList, node.nodelist_loop))
        _count(node, writes=not any(True for _ in _children(node)))
        for expression in _expressions(vars(node)):
            expression.filters = [(_sized(function), args) for function, args in expression.filters]
    return template


@functools.cache
def _sized(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, a filter, made to count the size of each value it makes against the
    budget: a value built and never written (`{% with b=a|add:a %}{{ b|length }}`)
    takes memory all the same. Its flags (is_safe, needs_autoescape...), which the
    engine reads off it, are copied by `wraps`."""
    multiplies = _FILTER_NAMES.get(function) == "join"

    @functools.wraps(function)
    def sized(value: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None and multiplies:
            # The separator is repeated between each two items: measured before it is.
            budget.fits(_joined_size(value, args[0] if args else ""))
        result = function(value, *args, **kwargs)
        if budget is not None and result is not value and all(result is not a for a in args):
            budget.build(_size(result))
        return result

    return sized


def _joined_size(value: Any, separator: Any) -> int:
    if not isinstance(value, str | list | tuple):
        return 0
    return _size(value) + max(len(value) - 1, 0) * len(str(separator))


def _size(value: Any) -> int:
    """A value's size as the budget counts it: a text's characters; a list's or a
    mapping's items, each one and its own size (a list may hold one long text many
    times, each written out in full); 1 for anything else (a number, a date)."""
    size = 0
    pending = [value]
    while pending and size <= MAX_VALUE:  # past the limit, by how much does not matter
        value = pending.pop()
        if isinstance(value, str):
            size += len(value)
        elif isinstance(value, Mapping):
            size += len(value)
            if size <= MAX_VALUE:
                pending.extend(value.keys())
                pending.extend(value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            size += len(value)
            if size <= MAX_VALUE:
                pending.extend(value)
        else:
            size += 1
    return size


def _count(node: Node, *, writes: bool) -> None:
    inner = node.render_annotated

    def render_annotated(context: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.tick()
        output = inner(context)
        if budget is not None and writes:
            budget.spend(len(str(output)))
        return output

    node.render_annotated = render_annotated  # type: ignore[method-assign]


class _TimedNodeList(NodeList):
    """A loop's body: iterated once per turn of the loop (ForNode.render)."""

    def __init__(self, nodes: NodeList) -> None:
        super().__init__(nodes)
        self.contains_nontext = getattr(nodes, "contains_nontext", False)

    def __iter__(self) -> Iterator[Node]:
        budget = _BUDGET.get()
        if budget is not None:
            budget.tick()
        return super().__iter__()
