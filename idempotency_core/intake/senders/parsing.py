"""Raw body to document: JSON, form-encoded, multipart, multipart with a JSON field.

A document is a plain dict of what the sender posted. Form fields that repeat
become lists; a single value stays a string. Multipart file parts are kept as
their file name only (Onefold forwards no attachments).

Every reader is linear in the body and bounded before it builds anything: the
body is at most ONEFOLD_MAX_BODY_BYTES (the hook checks it first); form and
form bodies take at most DATA_UPLOAD_MAX_NUMBER_FIELDS fields (Django's limit,
1,000 by default); multipart bodies at most MAX_MULTIPART_PARTS parts, counted
before they are read, then Django's own parser reads them with its limits (fields,
files, memory), one level deep (a part that is itself multipart is one opaque
field, never parsed again); JSON goes to the strict reader, 32 levels deep. A body
over a limit is malformed (400), like one that does not parse.
"""

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

# Django's parser spends about 30 microseconds a part: its own 1,000 fields would
# let a 64 KiB body cost 30 ms. Providers send a few dozen (Jotform about 25, its
# answers inside one JSON field).
MAX_MULTIPART_PARTS = 200


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
