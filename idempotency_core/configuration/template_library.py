"""The only tags and filters a business configuration's templates may use.

Django's own, chosen one by one, registered here as the sandboxed engine's sole builtin
library (templates.py). Left out, and why:

- `include`, `extends`, `block` (loader tags) and `load`: they reach templates and tag
  libraries outside the text itself; `url`, `csrf_token`: they reach the project;
- `debug`: it prints the context and every loaded module;
- `autoescape` and the filters `safe`, `safeseq`: they would let a visitor's value into
  the HTML unescaped;
- `now`, `timesince`, `timeuntil`, `random`, `lorem`: what they give depends on the
  moment of rendering or on chance, not on the submission (a template says what the
  submission makes of it; `submitted_at` gives its date);
- `pprint`, `json_script`, `urlize`, `urlizetrunc`, `dictsort`, `dictsortreversed`,
  `filter`, `querystring`: debugging output, markup of their own or lookups beyond the
  values given, which no confirmation or CRM property needs.
"""

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
