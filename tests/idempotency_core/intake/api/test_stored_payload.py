"""What is stored for a valid submission (`stored_payload`) is what DRF's own
`serializer.data` gives for it: the same keys in the same order, the same values
(the date-time written back as ISO 8601 in UTC), for any valid body. And the one
serializer that validates every body (`submission_validated`) decides as a new
serializer's `is_valid` would, with the same data or the same errors, whatever bodies
it validated before."""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from idempotency_core.intake.api.serializers import (
    SenderSubmissionSerializer,
    SubmissionSerializer,
    SurrogatesRefused,
    stored_payload,
    submission_validated,
)

_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=30)
_keys = st.text(st.sampled_from("abcXYZ019-_.:"), min_size=1, max_size=20)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), _text
)
_extra = st.dictionaries(
    _text,
    st.one_of(
        _scalars, st.lists(_scalars, max_size=3), st.dictionaries(_text, _scalars, max_size=3)
    ),
    max_size=4,
)
_moments = st.sampled_from(
    [
        "2026-11-29T10:15:00Z",
        "2026-11-29T10:15:00.123456+02:00",
        "2026-11-29 23:59:59-05:30",
        "0001-01-01T12:00:00+00:00",
    ]
)


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(None), strategy)


@st.composite
def _bodies(draw: st.DrawFn) -> dict[str, Any]:
    contact: dict[str, Any] = {
        "name": draw(_text.filter(bool)),
        "email": draw(st.sampled_from(["a@example.com", "Ann.Lee+x@mail.example.org"])),
    }
    if draw(st.booleans()):
        contact["phone"] = draw(st.text(st.sampled_from("0123456789 +-"), max_size=20))
    body: dict[str, Any] = {"form": draw(_text.filter(bool)), "contact": contact}
    optional = {
        "submission_id": draw(_optional(_keys)),
        "submitted_at": draw(_optional(_moments)),
        "message": draw(_optional(_text)),
        "fields": draw(_optional(_extra)),
        "revises": draw(_optional(_keys)),
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    # The order a sender writes the keys in is its own: the stored order is the fields'.
    return dict(draw(st.permutations(list(body.items()))))


def _plain(value: Any) -> Any:
    """DRF's ReturnDict and OrderedDict as plain dicts, keeping their order."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


@settings(max_examples=300, deadline=None)
@given(body=_bodies())
def test_the_stored_payload_is_what_serializer_data_gives(body):
    serializer = SubmissionSerializer(data=json.loads(json.dumps(body)))
    assert serializer.is_valid(), serializer.errors
    stored = stored_payload(serializer.validated_data)
    expected = _plain(serializer.data)
    assert stored == expected
    assert list(stored) == list(expected)
    assert list(stored["contact"]) == list(expected["contact"])
    assert type(stored) is dict and type(stored["contact"]) is dict
    assert json.loads(json.dumps(stored)) == stored  # plain JSON, as it is stored


def test_a_submitted_at_is_stored_as_iso_8601_in_utc():
    serializer = SubmissionSerializer(
        data={
            "form": "contact",
            "contact": {"name": "Ann", "email": "ann@example.com"},
            "submitted_at": "2026-11-29T12:15:00+02:00",
        }
    )
    assert serializer.is_valid(), serializer.errors
    assert stored_payload(serializer.validated_data)["submitted_at"] == "2026-11-29T10:15:00Z"


# What a sender gets wrong: each replaces one value of a valid body, or adds or drops a key.
_wrong_values = st.one_of(
    st.none(),
    st.just(""),
    st.integers(),
    st.just(["a list"]),
    st.just({"an": "object"}),
    st.just("x" * 300),
    st.just("a NUL \x00 in it"),
    st.just("a lone surrogate \ud800 in it"),
    st.just("not an address"),
    st.just("2026-11-29T10:15:00"),  # no offset
)


_TOP_LEVEL = ["submission_id", "form", "submitted_at", "contact", "message", "fields", "revises"]


@st.composite
def _any_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body = draw(_bodies())
    match draw(st.sampled_from(["valid", "top", "contact", "unknown", "dropped"])):
        case "top":
            body[draw(st.sampled_from(_TOP_LEVEL))] = draw(_wrong_values)
        case "contact":
            body["contact"][draw(st.sampled_from(["name", "email", "phone"]))] = draw(_wrong_values)
        case "unknown":
            body[draw(_keys)] = draw(_scalars)
        case "dropped":
            del body[draw(st.sampled_from(["form", "contact"]))]
    return body


@pytest.mark.parametrize("from_sender", [False, True], ids=["api", "hooks"])
@settings(max_examples=400, deadline=None)
@given(body=_any_bodies())
def test_the_shared_serializer_decides_as_a_new_one(from_sender, body):
    kind = SenderSubmissionSerializer if from_sender else SubmissionSerializer
    fresh = kind(data=body)
    try:
        validated = submission_validated(body, from_sender=from_sender)
    except ValidationError as exc:
        assert not fresh.is_valid()
        assert exc.detail == fresh.errors
        assert json.dumps(exc.detail) == json.dumps(fresh.errors)
    else:
        assert fresh.is_valid(), fresh.errors
        assert validated == fresh.validated_data
        assert stored_payload(validated) == _plain(fresh.data)


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.characters(categories=["Cs", "Ll", "Nd", "So"]), max_size=12))
def test_text_fields_refuse_surrogates_as_drf_does(text):
    """SurrogatesRefused is DRF's ProhibitSurrogateCharactersValidator made faster: the
    same refusals, messages (the first surrogate's code point) and codes."""

    def outcome(validator: Any) -> tuple[str, str] | None:
        try:
            validator(text)
        except ValidationError as exc:
            (detail,) = exc.detail
            return str(detail), detail.code
        return None

    assert outcome(SurrogatesRefused()) == outcome(ProhibitSurrogateCharactersValidator())


@settings(max_examples=10, deadline=None)
@given(bodies=st.lists(_any_bodies(), min_size=64, max_size=64))
def test_one_serializer_validates_bodies_from_many_threads_at_once(bodies):
    """A threaded server (runserver, gthread) validates bodies at the same moment with
    the one serializer, from its first use on: each thread gets its own body's answer."""
    shared = SubmissionSerializer()  # new, so that its fields are built under the race
    barrier = threading.Barrier(8)

    def answer(body: dict[str, Any]) -> Any:
        try:
            return "valid", shared.run_validation(body)
        except ValidationError as exc:
            return "invalid", exc.detail

    def worker(start: int) -> list[Any]:
        barrier.wait()
        return [answer(body) for body in bodies[start::8]]

    # Threads switch every microsecond, not every 5 ms: validations interleave.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(worker, range(8)))
    finally:
        sys.setswitchinterval(interval)
    for start, answers in enumerate(results):
        for body, got in zip(bodies[start::8], answers, strict=True):
            fresh = SubmissionSerializer(data=body)
            if fresh.is_valid():
                assert got == ("valid", fresh.validated_data)
            else:
                assert got == ("invalid", fresh.errors)
