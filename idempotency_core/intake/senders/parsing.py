"""Raw body to document: JSON, form-encoded, multipart, multipart with a JSON field.

A document is a plain dict of what the sender posted. Form fields that repeat
become lists; a single value stays a string. Multipart file parts are kept as
their file name only (Onefold forwards no attachments).
"""

from __future__ import annotations

from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qsl

from idempotency_core.intake import strictjson


class MalformedDeliveryError(ValueError):
    """The body cannot be read as the profile says it is written."""


PARSERS = ("json", "form", "multipart", "multipart_json")


def parse_body(
    body: bytes, *, content_type: str, parser: str, json_field: str = ""
) -> dict[str, Any]:
    """The document for `body`. `parser` is the profile's; `json_field` names the
    multipart (or form) field that carries a JSON string (Jotform's `rawRequest`)."""
    if parser == "json":
        document = _json(body)
    elif parser == "form":
        document = _form(body)
    elif parser in ("multipart", "multipart_json"):
        document = _multipart(body, content_type)
    else:
        raise MalformedDeliveryError(f"unknown parser {parser!r}")
    if parser == "multipart_json" or json_field:
        raw = document.get(json_field or "rawRequest")
        if not isinstance(raw, str):
            raise MalformedDeliveryError(f"the body has no {json_field or 'rawRequest'} field")
        inner = _json(raw.encode())
        document = {**document, **inner}
    return document


def _json(body: bytes) -> dict[str, Any]:
    # The strict reader: NaN, huge numbers, deep nesting, NUL, lone surrogates and
    # repeated keys are a malformed delivery (400), never a 500 or a stored row.
    try:
        document = strictjson.loads(body)
    except strictjson.StrictJSONError as exc:
        raise MalformedDeliveryError(f"the body is not valid JSON: {exc}") from exc
    if isinstance(document, list) and len(document) == 1 and isinstance(document[0], dict):
        return document[0]  # senders that post a one-element array of objects
    if not isinstance(document, dict):
        raise MalformedDeliveryError("the body must be a JSON object")
    return document


def _form(body: bytes) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedDeliveryError("the form body is not UTF-8") from exc
    document: dict[str, Any] = {}
    for name, value in parse_qsl(text, keep_blank_values=True, strict_parsing=False):
        _add(document, name, value)
    return document


def _multipart(body: bytes, content_type: str) -> dict[str, Any]:
    if "multipart/form-data" not in content_type.lower() or "boundary=" not in content_type:
        raise MalformedDeliveryError("expected multipart/form-data with a boundary")
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise MalformedDeliveryError("the multipart body has no parts")
    document: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        filename = part.get_filename()
        if filename:
            _add(document, name, filename)
            continue
        payload = part.get_payload(decode=True)
        raw = payload if isinstance(payload, bytes) else b""
        try:
            _add(document, name, raw.decode(part.get_content_charset() or "utf-8"))
        except (UnicodeDecodeError, LookupError) as exc:
            raise MalformedDeliveryError(f"field {name!r} is not readable text") from exc
    return document


def _add(document: dict[str, Any], name: str, value: str) -> None:
    """Repeated names (checkboxes, `name[]`) collect into a list."""
    key = name[:-2] if name.endswith("[]") else name
    if key in document:
        existing = document[key]
        document[key] = [*existing, value] if isinstance(existing, list) else [existing, value]
    else:
        document[key] = [value] if name.endswith("[]") else value
