"""Field maps: the expressions, and each preset on its provider's sample."""

from __future__ import annotations

import json

import pytest

from idempotency_core.intake.senders.mapping import (
    MappingError,
    document_map,
    email_normalise,
    evaluate,
    phone_normalise,
)
from idempotency_core.intake.senders.parsing import MalformedDeliveryError, parse_body
from idempotency_core.intake.senders.profiles import PRESETS, profile_resolve
from tests.support.senders import FIXTURES, SAMPLES

DOC = {
    "a": {"b": "x", "First Name": "Ada", "Last Name": "Lovelace"},
    "items": [{"type": "email", "email": "ada@example.com"}, {"type": "text", "text": "hi"}],
    "raw": json.dumps({"q4_email": "grace@example.com", "q3_fullName": {"first": "Grace"}}),
    "choice": "o2",
    "options": [{"id": "o1", "text": "Support"}, {"id": "o2", "text": "Sales"}],
}


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("a.b", "x"),
        (["a", "First Name"], "Ada"),
        ({"concat": [["a", "First Name"], ["a", "Last Name"]]}, "Ada Lovelace"),
        ({"first": ["a.missing", "a.b"]}, "x"),
        ({"find": "items", "where": {"type": "email"}, "take": "email"}, "ada@example.com"),
        (
            {"find": "items", "where": {"type": "EMAIL"}, "take": "email", "anycase": True},
            "ada@example.com",
        ),
        ({"json": "raw", "take": "q4_email"}, "grace@example.com"),
        ({"label": "choice", "options": "options"}, "Sales"),
        ({"suffix": "_b", "in": "a"}, None),
        ({"const": 3}, 3),
        ("nowhere.at.all", None),
    ],
)
def test_expressions(expression, value):
    assert evaluate(expression, DOC) == value


def test_an_expression_with_two_operators_is_refused():
    with pytest.raises(MappingError):
        evaluate({"concat": [], "first": []}, DOC)


def test_normalisation():
    assert email_normalise("  Ada@Example.COM ") == "Ada@example.com"
    assert phone_normalise("+44 (20) 7946-0958") == "+442079460958"
    assert phone_normalise("0044 20 7946 0958") == "+442079460958"
    assert phone_normalise("(202) 555-0147") == "2025550147"


def test_tally_choices_become_their_labels():
    document = json.loads((FIXTURES / "tally.body").read_bytes())
    mapped = document_map(PRESETS["tally"].field_map, document)
    assert mapped.fields["Topic"] == ["Sales"]
    assert mapped.fields["Interested in"] == ["Design", "Support plan"]
    assert "Company" not in mapped.fields  # unanswered


def test_jotform_answers_come_out_of_the_json_string_inside_the_multipart_body():
    sample = SAMPLES["jotform"]
    document = parse_body(sample.body, content_type=sample.content_type, parser="multipart_json")
    mapped = document_map(PRESETS["jotform"].field_map, document)
    assert (mapped.name, mapped.email, mapped.phone) == (
        "Ada Lovelace",
        "ada@example.com",
        "2025550147",
    )


def test_a_source_overrides_its_field_map():
    profile = profile_resolve(
        "gravityforms", {"field_map": {"email": ["5"], "message": ["7"]}, "form_id": "form_id"}
    )
    mapped = document_map(
        profile.field_map, {"1.3": "A", "1.6": "B", "5": "a@b.example", "7": "hi"}
    )
    assert (mapped.name, mapped.email, mapped.message) == ("A B", "a@b.example", "hi")
    with pytest.raises(ValueError, match="unknown profile settings"):
        profile_resolve("gravityforms", {"fieldmap": {}})


@pytest.mark.parametrize(
    ("body", "content_type", "parser"),
    [
        (b"\xff\xfe", "application/json", "json"),
        (b'{"a": NaN}', "application/json", "json"),
        (b"[1, 2]", "application/json", "json"),
        (b"a=1", "text/plain", "multipart"),
        (b"--x\r\n\r\n", "multipart/form-data; boundary=x", "multipart_json"),
    ],
)
def test_malformed_bodies_are_refused(body, content_type, parser):
    with pytest.raises(MalformedDeliveryError):
        parse_body(body, content_type=content_type, parser=parser)


def test_form_bodies_keep_repeated_fields():
    document = parse_body(b"a=1&b%5B%5D=x&b%5B%5D=y&c=", content_type="", parser="form")
    assert document == {"a": "1", "b": ["x", "y"], "c": ""}


def test_a_plain_form_s_other_fields_become_extra_fields():
    # `extras=[]` names the document itself: CF7's subject is kept, its ids are not.
    document = json.loads((FIXTURES / "cf7.body").read_bytes())
    mapped = document_map(PRESETS["cf7"].field_map, document)
    assert mapped.fields == {"your-subject": "Quote request"}
