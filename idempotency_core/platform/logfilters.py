"""Logging filters: what must never reach a log line, scrubbed on the way out.

Onefold's own log calls name ids (event, operation, delivery, run) and
exception classes, never a payload or a contact. This filter is the net
under that rule, for what other code writes (Django, django-q2, gunicorn,
psycopg's error texts) and for what slips through:

- the hook token in a path (`/hooks/NAME/t/<token>/`): Django's request
  logger writes the path of every 4xx and 5xx;
- email addresses, also URL-encoded (`ada%40example.com`);
- what was typed in a search box (`?q=...` in a logged path: the console's search
  takes names, and the access log writes every request's path);
- the values of contact keys (`name`, `email`, `phone`, `message`, `fields`,
  ...) in anything that looks like JSON, a Python dict or a form body:
  PostgreSQL's error CONTEXT quotes the JSON it could not store, django-q2
  logs a failed task's exception text;
- the values in SQL that Django logs (`django.db.backends`, at DEBUG): string
  literals and the parameters go, the statement's shape stays. A value
  compared in a WHERE clause has no key to recognise it by;
- exception messages in tracebacks. Frames and exception classes stay (they
  say where, and what kind); the messages go, because any of them may quote
  a value (a CRM's answer, a database error's DETAIL). The text an operator
  needs is on the attempt, behind the console's login.

`configure` is Django's LOGGING_CONFIG: it applies LOGGING, then puts the
filter on every handler that exists by then, including ones other code set
up before Django (gunicorn's error log in a worker).

`JsonFormatter` writes a record as one JSON object a line, for log shippers
(LOG_FORMAT=json). It formats what the filter left: the redacted message and
the traceback without messages, plus the ids the record names (`extra=`) or
that the code running it bound with `log_ids_bound`. It adds no other field
of the record, so nothing passed in `extra=` can carry a contact past the filter.
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

REDACTED = "[redacted]"

_HOOK_TOKEN = re.compile(r"(/hooks/[^/\s]+/t/)[^/\s?#]+")
# A search box's value in a query string (the console's header search takes names).
_SEARCH_VALUE = re.compile(r"([?&]q=)[^&\s\"'#]*")
# Local part, then "@" (or %40 in a URL or form body), then a dotted domain; Unicode
# letters included, since addresses may be internationalised. A Message-ID such
# as <opk_1@onefold> has no dot in its domain and stays readable.
_EMAIL = re.compile(
    r"[\w.!#$%&'*+/=?^`{|}~-]+(?:@|%40)[\w-]+(?:\.[\w-]+)*\.(?:[^\W\d_]{2,}|xn--[\w-]+)",
    re.IGNORECASE,
)
# Keys whose values are a contact's data, in submissions and in CRM records.
_CONTACT_KEYS = (
    "name|first_?name|last_?name|full_?name|email|e-?mail|phone|telephone|mobile"
    "|message|comments?|fields|contact|address|company"
)
# "key": or 'key': followed by its value; the value's extent is found by `_value_end`.
_QUOTED_KEY = re.compile(rf"""(["'])(?:{_CONTACT_KEYS})\1\s*:\s*""", re.IGNORECASE)
# key=value in a form body or a query string.
_FORM_PAIR = re.compile(rf"(?<![\w-])((?:{_CONTACT_KEYS})=)[^&\s]*", re.IGNORECASE)
# A traceback's last line quoted in a message ("ValueError: ..."): the message goes.
_EXCEPTION_LINE = re.compile(
    r"^(\s*[A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt|Refused)):[ \t].*$",
    re.MULTILINE,
)
# PostgreSQL's error fields that quote rows and statements.
_PG_FIELDS = re.compile(r"^(\s*(?:DETAIL|CONTEXT|STATEMENT|HINT):)[ \t].*$", re.MULTILINE)
# A string literal in SQL as psycopg writes it ('' inside is one quote).
_SQL_LITERAL = re.compile(r"'(?:[^']|'')*'")


def redact_sql(text: str) -> str:
    """Django's SQL log line, "(0.001) <statement>; args=<params>; alias=<db>", with
    every string literal of the statement and all of its parameters withheld."""
    statement, separator, rest = text.partition("; args=")
    statement = _SQL_LITERAL.sub(f"'{REDACTED}'", statement)
    if not separator:
        return statement
    _, alias_separator, alias = rest.rpartition("; alias=")
    return f"{statement}; args={REDACTED}{alias_separator}{alias}"


def redact(text: str) -> str:
    """`text` without tokens, addresses and contact values."""
    text = _HOOK_TOKEN.sub(r"\1[token]", text)
    text = _SEARCH_VALUE.sub(rf"\1{REDACTED}", text)
    text = _redact_contact_values(text)
    text = _FORM_PAIR.sub(rf"\1{REDACTED}", text)
    text = _PG_FIELDS.sub(rf"\1 {REDACTED}", text)
    text = _EXCEPTION_LINE.sub(rf"\1: {REDACTED}", text)
    return _EMAIL.sub(REDACTED, text)


def _redact_contact_values(text: str) -> str:
    if not _QUOTED_KEY.search(text):
        return text
    parts: list[str] = []
    position = 0
    for match in _QUOTED_KEY.finditer(text):
        if match.start() < position:  # inside a value already redacted
            continue
        parts.append(text[position : match.end()])
        parts.append(REDACTED)
        position = _value_end(text, match.end())
    parts.append(text[position:])
    return "".join(parts)


_CLOSING = {"{": "}", "[": "]"}
_SCALAR = re.compile(r"[^,}\]\n]*")


def _value_end(text: str, start: int) -> int:
    """Where the value starting at `start` ends: a quoted string, a bracketed
    object or list (nesting and quotes respected), or a bare scalar. A value cut
    short (PostgreSQL quotes only the start of a long JSON text) runs to the end
    of its line, so its tail is never left behind."""
    if start >= len(text):
        return start
    first = text[start]
    if first in "\"'":
        index = start + 1
        while index < len(text) and text[index] != "\n":
            if text[index] == "\\":
                index += 2
                continue
            if text[index] == first:
                return index + 1
            index += 1
        return _line_end(text, start)
    if first in _CLOSING:
        depth, quote, index = 0, "", start
        while index < len(text):
            char = text[index]
            if quote:
                if char == "\\":
                    index += 1
                elif char == quote:
                    quote = ""
            elif char in "\"'":
                quote = char
            elif char in "{[":
                depth += 1
            elif char in "}]":
                depth -= 1
                if depth == 0:
                    return index + 1
            index += 1
        return _line_end(text, start)
    match = _SCALAR.match(text, start)
    return match.end() if match else start


def _line_end(text: str, start: int) -> int:
    newline = text.find("\n", start)
    return len(text) if newline < 0 else newline


def traceback_without_messages(exc: BaseException) -> str:
    """The traceback of `exc` and the exceptions chained to it, frames and classes only."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    lines: list[str] = []
    older: BaseException | None = None
    for item in reversed(chain):
        if older is not None:
            lines.append(
                "\nThe above exception was the direct cause of the following exception:\n\n"
                if item.__cause__ is older
                else "\nDuring handling of the above exception, another exception occurred:\n\n"
            )
        lines.append("Traceback (most recent call last):\n")
        lines.extend(traceback.format_tb(item.__traceback__))
        lines.append(f"{_class_name(item)}: {REDACTED}\n")
        older = item
    return "".join(lines).rstrip("\n")


def _class_name(exc: BaseException) -> str:
    kind = type(exc)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


class RedactSecrets(logging.Filter):
    """Rewrites the record in place, so every handler after this one sees it redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            _redact_record(record)
        except Exception:  # a filter that raises would break the caller's log call
            record.msg, record.args = "[log record withheld: it could not be redacted]", ()
            record.exc_info, record.exc_text = None, None
        return True


class QuietTaskLines(logging.Filter):
    """On django-q2's logger: drops the three INFO lines it writes for every task
    (`Enqueued [queue] id` where a task is queued, `<worker> processing <task>` and
    `Processed '<func>' (<task>)`), and nothing else: a cluster's start, stop and
    recycling lines, and every warning and error (a failed task's included), pass.

    At a pipeline's rate they are the bulk of the log and cost CPU, and they say less
    than what Onefold keeps: each attempt's row, a line by ids for every attempt that
    did not succeed, and the metrics. ONEFOLD_Q_TASK_LINES=true keeps
    them. The lines are matched in django-q2's English text: under another language
    they are not recognised, and pass."""

    # (module, text in the message) of each line, as django_q 1.11 writes them.
    PER_TASK = (("tasks", "Enqueued ["), ("worker", " processing "), ("monitor", "Processed '"))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not isinstance(record.msg, str):
            return True
        return not any(
            record.module == module and text in record.msg for module, text in self.PER_TASK
        )


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # bad arguments for the format: logging reports it on emit
        message = str(record.msg)
    if record.name.startswith("django.db.backends"):
        message = redact_sql(message)
        # Django hands the statement and its parameters to formatters as well.
        for name in ("sql", "params"):
            if hasattr(record, name):
                setattr(record, name, REDACTED)
    redacted = redact(message)
    if record.args or record.msg != redacted:
        record.msg, record.args = redacted, ()
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = redact(traceback_without_messages(record.exc_info[1]))
        # Formatters then print exc_text; no handler can render the original.
        record.exc_info = None
    elif record.exc_text:
        record.exc_text = redact(record.exc_text)


# The ids a JSON line may carry; nothing else of a record's `extra=` is written.
LOG_IDS = ("event_id", "operation_id", "delivery_id")
# Ids of the work under way in this thread or task, for every line logged meanwhile
# (the django-q2 worker binds the operation a task runs: observability/logcontext.py).
log_ids: ContextVar[Mapping[str, str] | None] = ContextVar("onefold_log_ids", default=None)


@contextmanager
def log_ids_bound(**ids: object) -> Iterator[None]:
    """Lines logged inside carry these ids (None values are left out)."""
    token = log_ids.set(
        {
            **(log_ids.get() or {}),
            **{k: str(v) for k, v in ids.items() if k in LOG_IDS and v is not None},
        }
    )
    try:
        yield
    finally:
        log_ids.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the ids known, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(log_ids.get() or {})
        for name in LOG_IDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = str(value)
        if record.exc_info and record.exc_info[1] is not None:
            # Only when no filter ran first: the same policy, frames and classes only.
            entry["exception"] = redact(traceback_without_messages(record.exc_info[1]))
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        # Non-ASCII stays as it is, so a search of the log finds what was written.
        return json.dumps(entry, ensure_ascii=False, default=str)


def redact_every_handler() -> None:
    """Puts the filter on every handler of every logger that exists now."""
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if not any(isinstance(f, RedactSecrets) for f in handler.filters):
                handler.addFilter(RedactSecrets())


def configure(config: dict[str, Any]) -> None:
    """LOGGING_CONFIG: Django's dictConfig, then the filter on every handler."""
    logging.config.dictConfig(config)
    redact_every_handler()
