"""The only tags and filters a business configuration's templates may use."""

from __future__ import annotations

from django.template import Library, defaultfilters, defaulttags

TAGS = (
    "comment",
    "cycle",
    "firstof",
    "for",
    "if",
    "ifchanged",
    "regroup",
    "resetcycle",
    "spaceless",
    "templatetag",
    "verbatim",
    "widthratio",
    "with",
)
FILTERS = (
    "add",
    "addslashes",
    "capfirst",
    "center",
    "cut",
    "date",
    "default",
    "default_if_none",
    "divisibleby",
    "escape",
    "escapejs",
    "escapeseq",
    "filesizeformat",
    "first",
    "floatformat",
    "force_escape",
    "get_digit",
    "iriencode",
    "join",
    "last",
    "length",
    "linebreaks",
    "linebreaksbr",
    "linenumbers",
    "ljust",
    "lower",
    "make_list",
    "phone2numeric",
    "pluralize",
    "rjust",
    "slice",
    "slugify",
    "stringformat",
    "striptags",
    "time",
    "title",
    "truncatechars",
    "truncatechars_html",
    "truncatewords",
    "truncatewords_html",
    "unordered_list",
    "upper",
    "urlencode",
    "wordcount",
    "wordwrap",
    "yesno",
)

register = Library()
for _name in TAGS:
    register.tags[_name] = defaulttags.register.tags[_name]
for _name in FILTERS:
    # The function objects themselves: they carry is_safe, needs_autoescape and
    # expects_localtime, which the engine reads off them.
    register.filters[_name] = defaultfilters.register.filters[_name]
