"""A strict JSON reader for bodies from outside: what `json.loads` lets through, refused."""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeAlias

JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"

# Deep enough for any form builder's webhook (Typeform's is about 8); a 64 KiB body
# of brackets would otherwise be 65,536 levels.
MAX_DEPTH = 32
# Longest number token (digits, sign, point, exponent). Far below Python's own
# int-string limit (4,300 digits), whose ValueError must never surface.
MAX_NUMBER_LENGTH = 100

# What the depth scan looks at: brackets, and what starts or ends a string.
_STRUCTURE = re.compile(r'[\[\]{}"\\]')
_FORBIDDEN_CHARACTER = re.compile("[\x00\ud800-\udfff]")


class StrictJSONError(ValueError):
    """The text is not JSON this service accepts; the message says why, for the sender."""


def loads(
    data: bytes | str, *, max_depth: int = MAX_DEPTH, max_number_length: int = MAX_NUMBER_LENGTH
) -> JSONValue:
    """The JSON value of `data` (UTF-8 bytes or text), or StrictJSONError."""
    text = _text(data)
    # No value can be deeper than the text has opening brackets: most bodies need no scan.
    if text.count("[") + text.count("{") > max_depth:
        _check_depth(text, max_depth)
    # A decoded string holds NUL or a lone surrogate only if the text has one raw (a
    # str given, not UTF-8 bytes; a raw NUL is refused by the decoder) or writes one as
    # a \u escape. Without either, no string needs checking, keys included.
    careful = "\\u" in text or _FORBIDDEN_CHARACTER.search(text) is not None
    return _decoded(text, max_number_length, careful=careful)


def _decoded(text: str, max_number_length: int, *, careful: bool) -> JSONValue:
    """The value of `text`, whose depth is checked; `careful`: every string checked."""
    try:
        value: JSONValue = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=lambda token: _float(token, max_number_length),
            parse_int=lambda token: _int(token, max_number_length),
            object_pairs_hook=_object if careful else _object_of_plain_keys,
        )
    except json.JSONDecodeError as exc:
        raise StrictJSONError(str(exc)) from exc
    except RecursionError as exc:  # only if the depth scan were ever wrong
        raise StrictJSONError("Nested too deeply.") from exc
    if careful:
        _check_strings(value)
    return value


def _text(data: bytes | str) -> str:
    if isinstance(data, str):
        text = data
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(
                f"Not UTF-8 (byte {exc.start}): JSON must be sent as UTF-8."
            ) from exc
    if text.startswith("\ufeff"):
        raise StrictJSONError("Starts with a byte order mark: send UTF-8 without one.")
    return text


def _check_depth(text: str, max_depth: int) -> None:
    """Counts brackets outside strings in one linear pass (a regex matching whole
    strings backtracks quadratically on a body of unterminated escapes)."""
    depth = 0
    in_string = False
    escaped = -1  # the position a backslash escapes
    for match in _STRUCTURE.finditer(text):
        position, char = match.start(), match.group()
        if position == escaped:
            continue
        if char == "\\":
            escaped = position + 1
        elif char == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                raise StrictJSONError(f"Nested deeper than {max_depth} levels.")
        else:
            depth -= 1


def _refuse_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not a JSON number.")


def _float(token: str, max_length: int) -> float:
    _check_number_length(token, max_length)
    value = float(token)
    if not math.isfinite(value):
        raise StrictJSONError(f"The number {token} is out of range.")
    return value


def _int(token: str, max_length: int) -> int:
    # Checked before int(): a longer token could hit the interpreter's own limit.
    _check_number_length(token, max_length)
    return int(token)


def _check_number_length(token: str, max_length: int) -> None:
    if len(token) > max_length:
        raise StrictJSONError(f"A number is longer than {max_length} characters.")


def _object(pairs: list[tuple[str, JSONValue]]) -> dict[str, JSONValue]:
    document: dict[str, JSONValue] = {}
    for key, value in pairs:
        _check_string(key, "A key")
        if key in document:
            raise StrictJSONError(f"The key {_shown(key)} appears twice in one object.")
        document[key] = value
    return document


def _object_of_plain_keys(pairs: list[tuple[str, JSONValue]]) -> dict[str, JSONValue]:
    """`_object` for keys known to be plain text: built in C, walked only for a repeat."""
    document = dict(pairs)
    if len(document) < len(pairs):
        return _object(pairs)  # raises at the first key that appears twice
    return document


def _shown(key: str) -> str:
    return repr(key if len(key) <= 50 else f"{key[:50]}...")


def _check_strings(value: JSONValue) -> None:
    """Every string value, walked with a stack (keys were checked as objects were built)."""
    pending: list[JSONValue] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            _check_string(item, "A string")
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.values())


def _check_string(text: str, what: str) -> None:
    found = _FORBIDDEN_CHARACTER.search(text)
    if found is None:
        return
    if found.group() == "\x00":
        raise StrictJSONError(f"{what} contains the NUL character (\\u0000).")
    raise StrictJSONError(
        f"{what} contains an unpaired surrogate (\\u{ord(found.group()):04x}): not Unicode text."
    )
