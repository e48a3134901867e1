"""Document to submission: where a provider keeps the id, the contact and the message.

A field map is plain data (so a source can override it, stored as JSON): each
target (`name`, `email`, `phone`, `message`, ...) gets an *expression*:

- a path: a list of keys and indexes (`["payload", "data", "First Name"]`), or a
  string of dot-separated keys (`"submission.email"`) when no key has a dot;
- `{"concat": [expr, ...], "sep": " "}`: the non-empty values joined;
- `{"first": [expr, ...]}`: the first non-empty value;
- `{"find": path, "where": {subpath: value}, "take": path}`: in the array at
  `find`, the first element whose `subpath` equals `value` (ignoring case with
  `"anycase": true`), then `take` in it (Typeform's answers by field ref or
  type, Tally's fields by type, Google Forms' answers by title);
- `{"pairs": path, "name": "label", "value": "value", "options": "options"}`: an
  array of labelled answers as one object, label to value, option ids turned
  into their labels (Tally's fields); empty answers and Tally's per-option
  checkbox flags (booleans) are left out;
- `{"json": expr, "take": path}`: a JSON string decoded, then `take` in it;
- `{"label": expr, "options": path, "id": "id", "text": "text"}`: option ids
  turned into their labels through the options list (Tally's choices);
- `{"suffix": "_email", "in": path}`: the first key of the object at `in` (the
  document itself when absent) that ends with the suffix (Jotform's `q4_email`);
- `{"const": value}`;
- `{"object": {"label": expr, ...}}`: an object of the named values, empty ones
  left out (extra fields picked one by one in the console's field-map editor).

Email addresses are trimmed and their domain lower-cased; phone numbers keep
their digits and a leading `+`. Missing values are "", never an error: the
submission's own validation decides what is required.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

Expression = Any  # str | list[str | int] | dict[str, Any]: plain data, see above


class MappingError(ValueError):
    """A field map that cannot be applied (not the delivery's fault: the source's)."""


@dataclass(frozen=True)
class FieldMap:
    name: Expression = ""
    email: Expression = ""
    phone: Expression = ""
    message: Expression = ""
    submitted_at: Expression = ""
    form: Expression = ""
    # The object whose other keys become the submission's extra `fields`.
    extras: Expression = ""
    # Keys of `extras` never copied (ids, honeypots, what is mapped already).
    skip: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mapped:
    name: str
    email: str
    phone: str
    message: str
    submitted_at: str
    form: str
    fields: dict[str, Any] = field(default_factory=dict)


def field_map_data(field_map: FieldMap) -> dict[str, Any]:
    """The map as plain data (what `profile_overrides["field_map"]` holds), its unset
    targets left out (`[]` is set: the document itself): shown on an unreadable
    submission's case."""
    data = asdict(field_map)
    data["skip"] = list(field_map.skip) or None
    return {target: value for target, value in data.items() if value not in ("", None)}


def evaluate(expression: Expression, document: Any) -> Any:
    """The value `expression` names in `document`, or None."""
    if expression in ("", None):
        return None
    if isinstance(expression, str):
        return _walk(document, expression.split("."))
    if isinstance(expression, list):
        return _walk(document, expression)
    if not isinstance(expression, dict):
        raise MappingError(f"not an expression: {expression!r}")
    return _OPERATORS[_operator(expression)](expression, document)


def text(value: Any) -> str:
    """A mapped value as text: numbers as written, lists joined, None as ""."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    if isinstance(value, list):
        return ", ".join(t for t in (text(v) for v in value) if t)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value).strip()


def email_normalise(value: str) -> str:
    local, at, domain = value.strip().rpartition("@")
    return f"{local}@{domain.lower()}" if at and local else value.strip()


def phone_normalise(value: str) -> str:
    value = value.strip()
    digits = re.sub(r"\D", "", value)
    if value.startswith("00") and len(digits) > 2:
        return f"+{digits[2:]}"  # the international prefix written as 00
    return f"+{digits}" if value.startswith("+") and digits else digits


def document_map(field_map: FieldMap, document: Mapping[str, Any]) -> Mapped:
    """Applies the field map to a parsed document."""
    extras_source = evaluate(field_map.extras, document) if field_map.extras else None
    extras: dict[str, Any] = {}
    if isinstance(extras_source, dict):
        extras = {
            str(k): v
            for k, v in extras_source.items()
            if k not in field_map.skip and not str(k).startswith("_")
        }
    return Mapped(
        name=text(evaluate(field_map.name, document)),
        email=email_normalise(text(evaluate(field_map.email, document))),
        phone=phone_normalise(text(evaluate(field_map.phone, document))),
        message=text(evaluate(field_map.message, document)),
        submitted_at=text(evaluate(field_map.submitted_at, document)),
        form=text(evaluate(field_map.form, document)),
        fields=extras,
    )


def _walk(value: Any, path: list[Any]) -> Any:
    for key in path:
        if isinstance(value, dict):
            value = value.get(key if isinstance(key, str) else str(key))
        elif isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
            value = value[key]
        elif isinstance(value, list) and isinstance(key, str) and key.isdigit():
            index = int(key)
            value = value[index] if index < len(value) else None
        else:
            return None
    return value


def _operator(expression: dict[str, Any]) -> str:
    found = [key for key in _OPERATORS if key in expression]
    if len(found) != 1:
        raise MappingError(f"an expression needs exactly one of {sorted(_OPERATORS)}")
    return found[0]


def _concat(expression: dict[str, Any], document: Any) -> str:
    parts = [text(evaluate(e, document)) for e in expression["concat"]]
    return str(expression.get("sep", " ")).join(p for p in parts if p)


def _first(expression: dict[str, Any], document: Any) -> Any:
    for candidate in expression["first"]:
        value = evaluate(candidate, document)
        if text(value):
            return value
    return None


def _find(expression: dict[str, Any], document: Any) -> Any:
    items = evaluate(expression["find"], document)
    if not isinstance(items, list):
        return None
    where = expression.get("where") or {}
    anycase = bool(expression.get("anycase"))

    def same(found: Any, wanted: Any) -> bool:
        if anycase and isinstance(found, str) and isinstance(wanted, str):
            return found.casefold() == wanted.casefold()
        return bool(found == wanted)

    for item in items:
        if all(same(evaluate(path, item), wanted) for path, wanted in where.items()):
            return evaluate(expression.get("take", []), item) if expression.get("take") else item
    return None


def _json(expression: dict[str, Any], document: Any) -> Any:
    raw = evaluate(expression["json"], document)
    if not isinstance(raw, str):
        return None
    try:
        decoded = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return evaluate(expression["take"], decoded) if expression.get("take") else decoded


def _label(expression: dict[str, Any], document: Any) -> Any:
    value = evaluate(expression["label"], document)
    options = evaluate(expression["options"], document) or []
    id_key, text_key = expression.get("id", "id"), expression.get("text", "text")
    labels = {o.get(id_key): o.get(text_key) for o in options if isinstance(o, dict)}
    if isinstance(value, list):
        return [labels.get(v, v) for v in value]
    return labels.get(value, value)


def _pairs(expression: dict[str, Any], document: Any) -> Any:
    items = evaluate(expression["pairs"], document)
    if not isinstance(items, list):
        return None
    name_key = expression.get("name", "label")
    value_key = expression.get("value", "value")
    options_key = expression.get("options", "options")
    pairs: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        name, value = text(item.get(name_key)), item.get(value_key)
        if not name or value in (None, "", []) or isinstance(value, bool):
            continue
        options = item.get(options_key)
        if isinstance(options, list):
            labels = {o.get("id"): o.get("text") for o in options if isinstance(o, dict)}
            values = value if isinstance(value, list) else [value]
            value = [labels.get(v, v) for v in values]
        pairs[name] = value
    return pairs


def _const(expression: dict[str, Any], document: Any) -> Any:
    return expression["const"]


def _suffix(expression: dict[str, Any], document: Any) -> Any:
    container = evaluate(expression["in"], document) if expression.get("in") else document
    if not isinstance(container, dict):
        return None
    for key, value in container.items():
        if str(key).endswith(expression["suffix"]):
            return evaluate(expression["take"], value) if expression.get("take") else value
    return None


def _object(expression: dict[str, Any], document: Any) -> Any:
    named = expression["object"]
    if not isinstance(named, dict):
        raise MappingError("`object` names its values by label: an object of expressions")
    values = {str(label): evaluate(e, document) for label, e in named.items()}
    return {label: value for label, value in values.items() if value not in (None, "", [], {})}


_OPERATORS = {
    "concat": _concat,
    "first": _first,
    "find": _find,
    "json": _json,
    "label": _label,
    "const": _const,
    "suffix": _suffix,
    "pairs": _pairs,
    "object": _object,
}
