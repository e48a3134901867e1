"""Raw body to document: JSON, form-encoded, multipart, multipart with a JSON field."""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import parse_qsl

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.core.files.uploadhandler import MemoryFileUploadHandler
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.utils.http import parse_header_parameters

from idempotency_core.intake import strictjson


class MalformedDeliveryError(ValueError):
    """The body cannot be read as the profile says it is written."""


PARSERS = ("json", "form", "multipart", "multipart_json")

# Django's parser spends time on every part, and its own limit of 1,000 fields is far
# above what providers send: a few dozen (Jotform about 25, its
# answers inside one JSON field).
MAX_MULTIPART_PARTS = 200


def parse_body(
    body: bytes, *, content_type: str, parser: str, json_field: str = ""
) -> dict[str, Any]:
    """The document for `body`. `parser` is the profile's; `json_field` names the
    multipart (or form) field that carries a JSON string (Jotform's `rawRequest`)."""
    if parser not in PARSERS:
        raise MalformedDeliveryError(f"unknown parser {parser!r}")
    expected = "multipart" if parser == "multipart_json" else parser
    document = _READERS[_declared_reader(content_type) or expected](body, content_type)
    if parser == "multipart_json" or json_field:
        document = _with_json_field(document, json_field or "rawRequest")
    return document


def _declared_reader(content_type: str) -> str:
    """The reader the body's own Content-Type names ("" for any other type)."""
    media_type, _ = parse_header_parameters(content_type)
    if media_type == "application/json" or media_type.endswith("+json"):
        return "json"
    if media_type == "application/x-www-form-urlencoded":
        return "form"
    if media_type == "multipart/form-data":
        return "multipart"
    return ""


def _with_json_field(document: dict[str, Any], name: str) -> dict[str, Any]:
    """The document with the answers its JSON field carries merged in, or as it is
    when the field is missing or holds no JSON object: the sender's other fields are
    still what it sent (the map may read them, or the delivery waits for a map)."""
    raw = document.get(name)
    if not isinstance(raw, str):
        return document
    try:
        inner = strictjson.loads(raw.encode())
    except strictjson.StrictJSONError:
        return document
    return {**document, **inner} if isinstance(inner, dict) else document


def _json(body: bytes, content_type: str = "") -> dict[str, Any]:
    # The strict reader: NaN, huge numbers, deep nesting, NUL, lone surrogates and
    # repeated keys are a malformed delivery (400), never a 500 or a stored row.
    try:
        document = strictjson.loads(body)
    except strictjson.StrictJSONError as exc:
        raise MalformedDeliveryError(f"the body is not valid JSON: {exc}") from exc
    if isinstance(document, list) and len(document) == 1 and isinstance(document[0], dict):
        return document[0]  # senders that post a one-element array of objects
    if not isinstance(document, dict):
        return {"body": document}  # parsed: kept for a map that reads it, not refused
    return document


def _form(body: bytes, content_type: str = "") -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedDeliveryError("the form body is not UTF-8") from exc
    try:
        # max_num_fields counts the separators before anything is split.
        pairs = parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=False,
            max_num_fields=settings.DATA_UPLOAD_MAX_NUMBER_FIELDS,
        )
    except ValueError as exc:
        raise MalformedDeliveryError(
            f"the form has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields"
        ) from exc
    document: dict[str, Any] = {}
    for name, value in pairs:
        _add(document, name, value)
    return document


def _multipart(body: bytes, content_type: str) -> dict[str, Any]:
    media_type, parameters = parse_header_parameters(content_type)
    boundary = parameters.get("boundary", "")
    if media_type != "multipart/form-data" or not boundary:
        raise MalformedDeliveryError("expected multipart/form-data with a boundary")
    # Every part starts with the delimiter: counting it bounds the parse (one more
    # for the closing delimiter).
    if body.count(b"--" + boundary.encode("latin-1", "replace")) > MAX_MULTIPART_PARTS + 1:
        raise MalformedDeliveryError(f"the body has more than {MAX_MULTIPART_PARTS} parts")
    meta = {"CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(len(body))}
    try:
        # Django's parser: the request's own limits (fields, files, memory) and one
        # pass over the body. Files stay in memory: the body is at most 64 KiB.
        fields, files = MultiPartParser(
            meta, io.BytesIO(body), [MemoryFileUploadHandler()], "utf-8"
        ).parse()
    except (MultiPartParserError, SuspiciousOperation, ValueError) as exc:
        raise MalformedDeliveryError(f"the multipart body cannot be read: {exc}") from exc
    if not fields and not files:
        raise MalformedDeliveryError("the multipart body has no parts")
    document: dict[str, Any] = {}
    for name, values in fields.lists():
        for value in values:
            _add(document, name, value)
    for name, uploads in files.lists():
        for upload in uploads:
            _add(document, name, upload.name or "")
    return document


def _add(document: dict[str, Any], name: str, value: str) -> None:
    """Repeated names (checkboxes, `name[]`) collect into a list, appended in place:
    copying it for each value made a body of one repeated name quadratic."""
    key = name[:-2] if name.endswith("[]") else name
    existing = document.get(key)
    if isinstance(existing, list):
        existing.append(value)
    elif key in document:
        document[key] = [existing, value]
    else:
        document[key] = [value] if name.endswith("[]") else value


_READERS = {"json": _json, "form": _form, "multipart": _multipart}
