"""Input and output shapes of the ingest API (explicit fields only).

The submission serializer is the whole of the input contract (docs/senders.md,
"The ingest API"): what it validates is what is stored (`serializer.data`, dates written back
as ISO 8601), so an unknown key, a number where text belongs or a value that could
fail in the database is refused here, with a field error, before anything is
written. Strings are taken as sent (no trimming), so the schema's length limits
and patterns say exactly what is accepted.

`fields` holds the form's extra answers. Its rule, chosen to carry what form
builders post and nothing a CRM cannot take: an object whose values are JSON
scalars (string, number, boolean, null), or lists or objects of scalars, or lists
or objects of those: at most two levels of nesting below a field (a checkbox list,
an address object, a list of uploaded files each described by an object). Strings
anywhere in it, keys included, may not contain NUL.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeGuard

from django.core.validators import (
    EmailValidator,
    ProhibitNullCharactersValidator,
    RegexValidator,
)
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from idempotency_core.models import Operation

if TYPE_CHECKING:
    from drf_spectacular.openapi import AutoSchema
    from drf_spectacular.utils import Direction

# An event key (the Idempotency-Key header, the body's submission_id): 1 to 255
# visible ASCII characters without commas. HTTP servers join repeated headers with
# commas, so a comma would let two keys pass as one. \A and \Z with
# fullmatch semantics: `$` would let a trailing newline through.
KEY_REGEX = re.compile(r"\A[\x21-\x2b\x2d-\x7e]{1,255}\Z")
KEY_RULE = "1 to 255 visible ASCII characters without commas"
# The schema's version of the rule, written for ECMA-262 as OpenAPI expects.
KEY_SCHEMA_PATTERN = "^[\\u0021-\\u002b\\u002d-\\u007e]{1,255}$"


class CompiledRegexValidator(RegexValidator):
    """Django's RegexValidator with its pattern compiled when it is made. Django keeps
    the pattern lazy (a SimpleLazyObject), whose every method access raises and catches
    an AttributeError on its way to the pattern: 15 exceptions a submission."""

    def __init__(self, regex: str | re.Pattern[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(regex, *args, **kwargs)
        if isinstance(regex, re.Pattern):
            if self.flags:
                raise TypeError("If the flags are set, regex must be a regular expression string.")
            self.regex = regex
        else:
            self.regex = re.compile(regex, self.flags)


# No NUL in text: PostgreSQL's jsonb cannot store it. As a pattern (not DRF's own
# validator) so that the schema says it too.
_NO_NUL = CompiledRegexValidator(r"\A[^\x00]*\Z", message="Null characters are not allowed.")
# Django's EmailValidator's own user and domain rules, with the user part's quoted
# form left out (see EmailTextField).
EMAIL_REGEX = re.compile(
    r"\A[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z0-9-]{1,62}[A-Za-z0-9]\Z"
)
# RFC 3339 date-time with its offset; a time without one names no moment.
_RFC3339 = re.compile(
    r"\A\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})\Z"
)
FIELDS_MAX_DEPTH = 2

# Serializers are generic in the instance they render; these render dicts built
# by the views, except OperationStatusSerializer, which renders operations.


def is_event_key(value: object) -> TypeGuard[str]:
    """True for a valid event key (docs/senders.md, "The ingest API")."""
    return isinstance(value, str) and KEY_REGEX.fullmatch(value) is not None


class SurrogatesRefused(ProhibitSurrogateCharactersValidator):
    """DRF's check, with its message and code, made by a compiled pattern: DRF's
    own runs a Python generator over every character of every text field."""

    def __call__(self, value: Any) -> None:
        found = _SURROGATE.search(str(value))
        if found is not None:
            message = self.message.format(code_point=ord(found.group()))
            raise serializers.ValidationError(message, code=self.code)


class TextField(serializers.CharField):
    """A string and only a string (DRF's CharField turns 42 into "42"), kept as sent
    (no trimming), without NUL or unpaired surrogates."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators = [
            SurrogatesRefused() if isinstance(v, ProhibitSurrogateCharactersValidator) else v
            for v in self.validators
            if not isinstance(v, ProhibitNullCharactersValidator)
        ]
        self.validators.append(_NO_NUL)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class IdnaEmailValidator(CompiledRegexValidator):
    """EMAIL_REGEX, with an internationalised domain checked in its IDNA form (as
    Django's EmailValidator does). A RegexValidator, so that the schema shows it."""

    def __call__(self, value: Any) -> None:
        local, at, domain = str(value).rpartition("@")
        if at and not domain.isascii():
            # Left as it is when it has no IDNA form: the pattern then refuses it.
            with contextlib.suppress(UnicodeError):
                domain = domain.encode("idna").decode("ascii")
        super().__call__(f"{local}{at}{domain}")


class EmailTextField(TextField, serializers.EmailField):
    """An address as the schema's pattern says: a dot-atom local part in ASCII and a
    domain of dotted labels whose last is 2 to 63 characters, which is the part of
    what Django's EmailValidator accepts that a JSON Schema pattern can state (no
    quoted local parts, address literals or `localhost`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # The pattern admits a part of what Django's validator does: it alone decides.
        self.validators = [
            v for v in self.validators if v is not _NO_NUL and not isinstance(v, EmailValidator)
        ]
        self.validators.insert(0, IdnaEmailValidator(EMAIL_REGEX, "Enter a valid email address."))


class KeyField(TextField):
    """An event key: `submission_id`, `revises`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if v is not _NO_NUL]
        self.validators.append(CompiledRegexValidator(KEY_REGEX, message=f"Must be {KEY_RULE}."))


class SubmittedAtField(serializers.DateTimeField):
    """An RFC 3339 date-time with an offset, stored back as ISO 8601 in UTC."""

    def to_internal_value(self, value: datetime | str) -> datetime:
        if not isinstance(value, str) or not _RFC3339.fullmatch(value):
            self.fail("invalid", format="RFC 3339 with a time zone, e.g. 2026-11-29T10:15:00Z")
        try:
            return super().to_internal_value(value)
        except OverflowError:
            # An offset that moves 0001-01-01 or 9999-12-31 out of the calendar.
            self.fail("invalid", format="a date-time between the years 1 and 9999")


_SCALAR: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "pattern": "^[^\\u0000]*$"},
        {"type": "number"},
        # OpenAPI 3.0 writes null as `nullable` beside a type.
        {"type": "boolean", "nullable": True},
    ],
}


def _nested(inner: dict[str, Any]) -> dict[str, Any]:
    return {
        "anyOf": [
            _SCALAR,
            {"type": "array", "items": inner},
            {"type": "object", "additionalProperties": inner},
        ]
    }


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": _nested(_nested(_SCALAR)),
        "description": "Extra form fields: JSON scalars, or lists and objects of them, at "
        "most two levels deep. Keys and strings without NUL.",
    }
)
class ExtraFieldsField(serializers.Field[dict[str, Any], Any, dict[str, Any], Any]):
    """`fields`: see the module's docstring for the rule."""

    default_error_messages = {
        "not_object": "Expected an object of extra fields.",
    }

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("not_object")
        for name in data:
            problem = _key_problem(name)
            if problem:
                raise serializers.ValidationError([f"A field name: {problem}"])
        errors = {
            name: [problem]
            for name, value in data.items()
            if (problem := _value_problem(value, FIELDS_MAX_DEPTH))
        }
        if errors:
            raise serializers.ValidationError(errors)
        return data

    def to_representation(self, value: dict[str, Any]) -> dict[str, Any]:
        return value


def _key_problem(name: object) -> str:
    if not isinstance(name, str):
        return "Field names must be strings."
    return _text_problem(name)


# An unpaired surrogate, searched in C: a generator over each character of every
# field of a body is far slower.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_problem(text: str) -> str:
    if "\x00" in text:
        return "Null characters are not allowed."
    if _SURROGATE.search(text):
        return "Surrogate characters are not allowed."
    return ""


def _value_problem(value: object, depth: int) -> str:
    """Why `value` breaks the `fields` rule, or "" when it keeps it."""
    if value is None or isinstance(value, bool | int):
        return ""
    if isinstance(value, float):
        return "" if math.isfinite(value) else "Numbers must be finite."
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, list | dict):
        if depth == 0:
            return f"Nested deeper than {FIELDS_MAX_DEPTH} levels."
        keys = list(value) if isinstance(value, dict) else []
        items = list(value.values()) if isinstance(value, dict) else value
        problems = [*map(_key_problem, keys), *(_value_problem(i, depth - 1) for i in items)]
        return next((p for p in problems if p), "")
    return "Must be a string, number, boolean, null, list or object."


class KnownKeysSerializer(serializers.Serializer[dict[str, Any]]):
    """Refuses keys the serializer does not declare, each with its own field error:
    what is not validated is never stored."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        """The declared fields, each copied shallowly for this instance to bind.

        DRF deep-copies them for every serializer instance, so that a view may change
        one instance's fields without touching the class's, and its deep copy runs each
        field's __init__ again (validators built anew): a large share of an ingest
        request's CPU. No Onefold code changes a field after declaring it, so a copy
        that shares the declared field's validators and messages is enough: the copy, not the
        declared field, is bound to this instance (parent, name). A nested serializer's
        copy must build its own fields, so a cached set is not carried over.

        The copy is made as `copy.copy` makes it (a new instance of the class, its
        attributes those of the declared field) without copy's protocol lookups,
        `__reduce_ex__` and the class's `__new__` (which DRF uses only to record the
        arguments, already among the attributes)."""
        fields = {}
        for name, declared in self._declared_fields.items():
            field = object.__new__(type(declared))
            field.__dict__.update(declared.__dict__)
            field.__dict__.pop("fields", None)  # a nested serializer's cached fields
            fields[name] = field
        return fields

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            unknown = {str(k): ["Unknown field."] for k in data if k not in self.fields}
        try:
            value: dict[str, Any] = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            detail = exc.detail if isinstance(exc.detail, dict) else {}
            raise serializers.ValidationError({**unknown, **detail}) from exc
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class KnownKeysSchema(OpenApiSerializerExtension):
    """The schema says what KnownKeysSerializer does: no other keys
    (`additionalProperties: false`). Optional text that may be blank is written with
    anyOf: drf-spectacular's oneOf of "the pattern" and "empty" matches "" twice,
    which would make the empty string invalid."""

    target_class = KnownKeysSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        # The base class's default body, on the subclass being mapped (`target`): drf-
        # spectacular offers no public call that maps a serializer bypassing extensions.
        schema: dict[str, Any] = auto_schema._map_serializer(  # type: ignore[no-untyped-call]
            self.target, direction, bypass_extensions=True
        )
        schema["additionalProperties"] = False
        for prop in schema.get("properties", {}).values():
            if "oneOf" in prop:
                prop["anyOf"] = prop.pop("oneOf")
        return schema


class ContactSerializer(KnownKeysSerializer):
    """The person who filled in the form."""

    name = TextField(min_length=1, max_length=200)
    email = EmailTextField(min_length=1, max_length=254)
    phone = TextField(max_length=50, required=False, allow_blank=True)


class SubmissionSerializer(KnownKeysSerializer):
    """One form submission (docs/senders.md, "The ingest API"); no other keys are accepted."""

    submission_id = KeyField(
        max_length=255,
        required=False,
        help_text=f"Names the event when there is no Idempotency-Key header: {KEY_RULE}.",
    )
    form = TextField(min_length=1, max_length=100)
    submitted_at = SubmittedAtField(required=False)
    contact = ContactSerializer()
    message = TextField(max_length=10_000, allow_blank=True, required=False)
    # The body's own key is "fields": DRF's metaclass moves declared fields off the
    # class, so this never hides Serializer.fields, but the stubs cannot see that.
    fields = ExtraFieldsField(required=False)  # type: ignore[assignment]
    revises = KeyField(
        max_length=255,
        required=False,
        help_text="The key of an earlier submission of the same contact that this one edits.",
    )


class SenderContactSerializer(ContactSerializer):
    """A hook's contact (docs/senders.md): a sender's form may have no email field
    (or no name field), so any one of name, email address and phone number is enough;
    with none of them nothing says who sent the submission, and it is unreadable. The
    JSON API keeps ContactSerializer's rule: a program posting it can send both."""

    name = TextField(max_length=200, required=False, allow_blank=True)
    email = EmailTextField(max_length=254, required=False, allow_blank=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not any(attrs.get(name) for name in ("name", "email", "phone")):
            raise serializers.ValidationError(
                "No name, email address or phone number: nothing says who sent it."
            )
        return attrs


class SenderSubmissionSerializer(SubmissionSerializer):
    """A submission a hook mapped from a sender's delivery: the API's body, with
    SenderContactSerializer's contact rule."""

    contact = SenderContactSerializer()


# One serializer of each kind validates every body (`submission_validated`): the
# API's, and the hooks' (a sender's mapped delivery).
_SUBMISSION = SubmissionSerializer()
_SENDER_SUBMISSION = SenderSubmissionSerializer()


def submission_validated(body: Any, *, from_sender: bool = False) -> dict[str, Any]:
    """A submission's validated data, or `serializers.ValidationError` whose detail is
    what `serializer.errors` would give (a body is always an object here, so DRF's
    "No data provided" case never arises). `from_sender`: a hook's mapped delivery
    (SenderSubmissionSerializer's contact rule).

    DRF builds and binds a serializer's fields (and its nested serializer's) for every
    new instance, a visible share of an ingest request (docs/benchmarks.md). Validating
    (`run_validation`) changes nothing on the instance, and these serializers are given
    no context, so one instance, built once, validates every body; what `is_valid`
    adds is only keeping the result on the instance
    (tests/idempotency_core/intake/api/test_stored_payload.py holds the two to one)."""
    serializer = _SENDER_SUBMISSION if from_sender else _SUBMISSION
    validated: dict[str, Any] = serializer.run_validation(body)
    return validated


def stored_payload(validated: Mapping[str, Any]) -> dict[str, Any]:
    """What is stored for a valid submission: its validated data as plain JSON, as
    `serializer.data` gives it (plain dicts, in the fields' order).

    A text field's representation of a validated string is that string, and the extra
    fields' is their object, so only the other fields (the date-time, written back as
    ISO 8601) are asked for theirs, not every field as `serializer.data` asks
    (tests/idempotency_core/intake/api/test_stored_payload.py holds the two to one)."""
    return _represented(_SUBMISSION, validated)


def _represented(
    serializer: serializers.Serializer[Any], validated: Mapping[str, Any]
) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name, field in serializer.fields.items():
        if name not in validated:  # an optional field not sent (DRF's SkipField)
            continue
        value = validated[name]
        if isinstance(field, serializers.Serializer):
            data[name] = _represented(field, value)
        elif isinstance(field, serializers.CharField | ExtraFieldsField) and type(value) in (
            str,
            dict,
        ):
            data[name] = value
        else:
            data[name] = field.to_representation(value)
    return data


# Event statuses as the API reports them (docs/senders.md); `received` only on first receipt.
EVENT_STATUSES = ["processing", "completed", "needs_review"]
# Operation statuses by value only: with the model's labels the choice set would be
# the staff API's, named once for two components (a drf-spectacular naming warning).
OPERATION_STATUSES = [choice.value for choice in Operation.Status]


class SubmissionAcceptedSerializer(serializers.Serializer[dict[str, Any]]):
    event_id = serializers.UUIDField()
    status = serializers.ChoiceField(
        choices=["received", *EVENT_STATUSES],
        help_text="`received` on first receipt; on a repeat, the event's current status.",
    )
    status_url = serializers.URLField()


class OperationStatusSerializer(serializers.Serializer[Operation]):
    step = serializers.CharField()
    status = serializers.ChoiceField(choices=OPERATION_STATUSES)
    attempts = serializers.IntegerField(source="attempt_count")
    destination_ref = serializers.CharField(
        help_text="The destination's id for the effect (record, task, message); "
        "empty until the step succeeds."
    )


class SubmissionStatusSerializer(serializers.Serializer[dict[str, Any]]):
    event_id = serializers.UUIDField(source="id")
    status = serializers.ChoiceField(choices=EVENT_STATUSES)
    operations = OperationStatusSerializer(many=True)


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """Every refusal: a machine-readable `code`, a sentence, and where they apply the
    field errors (`errors`, keyed by field, nested like the body) or the event."""

    code = serializers.CharField()
    detail = serializers.CharField()
    # Named like Serializer.errors: DRF's metaclass moves declared fields off the
    # class (see `fields` above), which the stubs cannot follow.
    errors = serializers.DictField(  # type: ignore[assignment]
        required=False, help_text="Field errors: field name to messages (nested for objects)."
    )
    event_id = serializers.UUIDField(
        required=False, help_text="With idempotency_key_reused: the event the key names."
    )
