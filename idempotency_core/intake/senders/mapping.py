"""Document to submission: where a provider keeps the id, the contact and the message."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any

from idempotency_core.intake.senders import finding

Expression = Any  # str | list[str | int] | dict[str, Any]: plain data (docs/internals.md)


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


# The answers each `detect` and `answers` expression reads, built once per document
# while one map is applied (five expressions usually read the same answers).
_ANSWER_VIEWS: ContextVar[dict[tuple[int, str], list[finding.Answer]] | None] = ContextVar(
    "answer_views", default=None
)


def document_map(field_map: FieldMap, document: Mapping[str, Any]) -> Mapped:
    """Applies the field map to a parsed document."""
    views = _ANSWER_VIEWS.set({})
    try:
        return _document_map(field_map, document)
    finally:
        _ANSWER_VIEWS.reset(views)


def _document_map(field_map: FieldMap, document: Mapping[str, Any]) -> Mapped:
    # `[]` (the document itself) is a path too: only "" and None mean "no extras".
    extras_source = evaluate(field_map.extras, document)
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


def _is(expression: dict[str, Any], document: Any) -> Any:
    value = evaluate(expression["of"], document)
    check = {"email": finding.is_email, "phone": finding.is_phone}.get(expression["is"])
    if check is None:
        raise MappingError(f"'is' checks email or phone, not {expression['is']!r}")
    written = text(value)
    return written if check(written) else None


def _detect(expression: dict[str, Any], document: Any) -> Any:
    try:
        found = finding.find(expression["detect"], _answers_in(expression, document))
    except ValueError as exc:
        raise MappingError(str(exc)) from exc
    return found.value if found is not None else None


def _readable_answers(expression: dict[str, Any], document: Any) -> Any:
    answers = _answers_in(expression, document)
    omit: list[str] = []
    for kind in expression.get("omit") or ():
        try:
            found = finding.find(kind, answers)
        except ValueError as exc:
            raise MappingError(str(exc)) from exc
        if found is not None:
            omit.extend(found.keys)
    return finding.readable(answers, omit=omit)


def _answers_in(expression: dict[str, Any], document: Any) -> list[finding.Answer]:
    """The answers `expression` says where to find (docs/internals.md)."""
    views = _ANSWER_VIEWS.get()
    if views is None:
        return _answers_read(expression, document)
    where = {k: v for k, v in expression.items() if k not in ("detect", "answers", "omit")}
    # The document outlives the map's application, so its id names it meanwhile.
    view = (id(document), json.dumps(where, sort_keys=True, default=str))
    if view not in views:
        views[view] = _answers_read(expression, document)
    return views[view]


def _answers_read(expression: dict[str, Any], document: Any) -> list[finding.Answer]:
    place = expression.get("in")
    container = document if place in ("", None) else evaluate(place, document)
    answers: list[finding.Answer] = []
    if isinstance(container, dict):
        only = re.compile(expression["keys"]) if expression.get("keys") else None
        skip = set(expression.get("skip") or ())
        entries = finding.fold_composites((str(k), v) for k, v in container.items())
        for key, value in entries:
            if key in skip or key.startswith("_") or (only and not only.search(key)):
                continue
            # HubSpot's older contact properties wrap each value: {"value": ...}.
            if isinstance(value, dict) and "value" in value and finding.widget_text(value) is None:
                value = value["value"]
            answers.append(finding.Answer(key=key, value=value))
    elif isinstance(container, list):
        answers = _items(expression, document, container)
    labels = expression.get("labels")
    if labels:
        answers = finding.answers_labelled(answers, text(evaluate(labels, document)))
    return answers


def _items(expression: dict[str, Any], document: Any, items: list[Any]) -> list[finding.Answer]:
    key_path = expression.get("id", "key")
    title_path = expression.get("title", "label")
    type_path = expression.get("type", "type")
    value_path = expression.get("value", "value")
    titles: dict[Any, str] = {}
    spec = expression.get("titles")
    if isinstance(spec, dict):
        for named in evaluate(spec.get("in", ""), document) or ():
            if isinstance(named, dict):
                titles[named.get(spec.get("id", "id"))] = text(named.get(spec.get("text", "title")))
    answers: list[finding.Answer] = []
    for number, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind = text(evaluate(type_path, item))
        if value_path == "@type":
            value = item.get(str(item.get("type", "")))
            # Typeform's choice answers: {"label": ...} and {"labels": [...]}.
            if isinstance(value, dict) and ("label" in value or "labels" in value):
                value = value.get("label", value.get("labels"))
        else:
            value = evaluate(value_path, item)
        label = text(evaluate(title_path, item))
        if isinstance(spec, dict):
            label = titles.get(evaluate(spec.get("match", "id"), item)) or label
        key = text(evaluate(key_path, item)) or label or str(number)
        answers.append(finding.Answer(key=key, value=value, type=kind, label=label))
    return answers


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
    "is": _is,
    "detect": _detect,
    "answers": _readable_answers,
    "object": _object,
}
