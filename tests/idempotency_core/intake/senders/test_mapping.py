"""Field maps: the expressions, and each preset on every sample of its provider."""

from __future__ import annotations

import json
import time

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
from tests.support.senders import ADA_MESSAGE, FIXTURES, PROVIDERS, SAMPLES

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
        (b"a=1", "application/json", "form"),
        (b"a=1", "text/plain", "multipart"),
        (b"--x\r\n\r\n", "multipart/form-data; boundary=x", "multipart_json"),
    ],
)
def test_malformed_bodies_are_refused(body, content_type, parser):
    with pytest.raises(MalformedDeliveryError):
        parse_body(body, content_type=content_type, parser=parser)


@pytest.mark.parametrize(
    ("body", "content_type", "parser", "document"),
    [
        # Gravity Forms' feed set to its "form" format, to a profile that reads JSON.
        (
            b"1.3=Grace&1.6=Hopper&2=grace%40example.com",
            "application/x-www-form-urlencoded",
            "json",
            {"1.3": "Grace", "1.6": "Hopper", "2": "grace@example.com"},
        ),
        # A website's form posted by fetch() as JSON, to the html profile.
        (b'{"name": "Ada"}', "application/json; charset=utf-8", "form", {"name": "Ada"}),
        (b'{"name": "Ada"}', "application/vnd.api+json", "form", {"name": "Ada"}),
        # No type, or one that is none of the three: the profile's reader.
        (b"name=Ada", "", "form", {"name": "Ada"}),
        (b'{"name": "Ada"}', "text/plain", "json", {"name": "Ada"}),
        # Jotform's answers without (or with a broken) rawRequest: its other fields.
        (
            b"formID=1&q3_name%5Bfirst%5D=Ada",
            "application/x-www-form-urlencoded",
            "multipart_json",
            {"formID": "1", "q3_name[first]": "Ada"},
        ),
        (
            b"rawRequest=%7Bnot+json&formID=1",
            "application/x-www-form-urlencoded",
            "multipart_json",
            {"rawRequest": "{not json", "formID": "1"},
        ),
        (
            b"rawRequest=%7B%22q3_name%22%3A%22Ada%22%7D",
            "application/x-www-form-urlencoded",
            "multipart_json",
            {"rawRequest": '{"q3_name":"Ada"}', "q3_name": "Ada"},
        ),
        # JSON that parses but is no object: kept under "body", never refused.
        (b"[1, 2]", "application/json", "json", {"body": [1, 2]}),
        (b"[]", "application/json", "json", {"body": []}),
    ],
)
def test_a_body_is_read_as_its_content_type_says(body, content_type, parser, document):
    assert parse_body(body, content_type=content_type, parser=parser) == document


def test_an_html_form_posted_as_multipart_is_read_as_one():
    # <form enctype="multipart/form-data">, as a form with a file input must be.
    body = (
        b'--b\r\nContent-Disposition: form-data; name="name"\r\n\r\nAda Lovelace\r\n'
        b'--b\r\nContent-Disposition: form-data; name="email"\r\n\r\nada@example.com\r\n'
        b'--b\r\nContent-Disposition: form-data; name="cv"; filename="cv.pdf"\r\n'
        b"Content-Type: application/pdf\r\n\r\n%PDF-1.4\r\n--b--\r\n"
    )
    document = parse_body(body, content_type="multipart/form-data; boundary=b", parser="form")
    mapped = document_map(PRESETS["html"].field_map, document)
    assert (mapped.name, mapped.email, mapped.fields) == (
        "Ada Lovelace",
        "ada@example.com",
        {"cv": "cv.pdf"},
    )


def test_form_bodies_keep_repeated_fields():
    document = parse_body(b"a=1&b%5B%5D=x&b%5B%5D=y&c=", content_type="", parser="form")
    assert document == {"a": "1", "b": ["x", "y"], "c": ""}


def test_a_plain_form_s_other_fields_become_extra_fields():
    # `extras=[]` names the document itself: CF7's subject is kept, its ids are not.
    document = json.loads((FIXTURES / "cf7.body").read_bytes())
    mapped = document_map(PRESETS["cf7"].field_map, document)
    assert mapped.fields == {"your-subject": "Quote request"}


# Every sample under tests/fixtures/senders/ and its providers/ folder, and the
# contact and message its notes (the sibling .md) say it carries: (profile, name,
# email, phone as normalised, message). "" where the sample has none.
TYPEFORM_ANSWERS = json.loads((PROVIDERS / "typeform.json").read_text())["form_response"]["answers"]
TYPEFORM_MESSAGE = TYPEFORM_ANSWERS[0]["text"]
CRLF_MESSAGE = ADA_MESSAGE.replace("\n", "\r\n")
EXPECTED: dict[str, tuple[str, str, str, str, str]] = {
    "providers/typeform.json": ("typeform", "Laura", "laura@example.com", "", TYPEFORM_MESSAGE),
    "providers/formspree.json": (
        "formspree",
        "Sarah Nguyen",
        "sarah@example.com",
        "",
        "I sat the GAMSAT before and need help urgently with essays before September.",
    ),
    # The docs' entry of a form that is not a contact form: a choice in 1, text in 2.
    "providers/gravityforms.json": ("gravityforms", "", "", "", ""),
    # A Webhooks API event: ids only, the contact must be fetched (hubspot.md).
    "providers/hubspot.json": ("hubspot", "", "", "", ""),
    "providers/webflow.json": (
        "webflow",
        "Zaphod Beeblebrox",
        "zaphod@heartofgold.ai",
        "15550000000",
        "",
    ),
    "fixtures/tally.body": (
        "tally",
        "Ada Lovelace",
        "ada@example.com",
        "+442079460958",
        ADA_MESSAGE,
    ),
    "fixtures/jotform.body": (
        "jotform",
        "Ada Lovelace",
        "ada@example.com",
        "2025550147",
        "Hello, I'd like a quote for 20 units. Please call me back.",
    ),
    "fixtures/jotform-tutoring.body": ("jotform", "Niloth P", "", "", ""),
    "fixtures/jotform-brightsparks.body": (
        "jotform",
        "Ada Lovelace",
        "",
        "",
        "She needs help with GCSE algebra before the May exams.",
    ),
    "fixtures/jotform-feedback.body": (
        "jotform",
        "",
        "",
        "",
        "The new personalized recommendations feature is great!",
    ),
    "fixtures/jotform-colon-comma.body": ("jotform", "", "", "", ""),
    "fixtures/cf7.body": ("cf7", "Ada Lovelace", "ada@example.com", "+442079460958", CRLF_MESSAGE),
    "fixtures/wpforms.body": (
        "wpforms",
        "Ada Lovelace",
        "ada@example.com",
        "2025550147",
        CRLF_MESSAGE,
    ),
    "fixtures/googleforms.body": (
        "googleforms",
        "Ada Lovelace",
        "ada@example.com",
        "+442079460958",
        ADA_MESSAGE,
    ),
    "fixtures/html.body": (
        "html",
        "Ada Lovelace",
        "ada@example.com",
        "+442079460958",
        CRLF_MESSAGE,
    ),
    "fixtures/gravityforms-contact.json": (
        "gravityforms",
        "Grace Hopper",
        "grace@example.com",
        "5550102030",
        "Could you quote for a new office network?",
    ),
    "fixtures/hubspot-workflow.json": (
        "hubspot",
        "Katherine Johnson",
        "katherine@example.com",
        "+15550100",
        "Please call me about a maintenance contract.",
    ),
}


def sample_files() -> set[str]:
    providers = {f"providers/{p.name}" for p in PROVIDERS.glob("*.json")}
    fixtures = {f"fixtures/{p.name}" for p in FIXTURES.iterdir() if p.suffix in (".body", ".json")}
    return providers | fixtures


def sample_document(name: str, profile: str) -> dict:
    folder, file = name.split("/")
    body = ((PROVIDERS if folder == "providers" else FIXTURES) / file).read_bytes()
    content_type = ""  # the profile's own reader
    if body.startswith(b"--"):  # multipart: the boundary is the first line's
        content_type = "multipart/form-data; boundary=" + body.split(b"\r\n", 1)[0][2:].decode()
    preset = PRESETS[profile]
    return parse_body(
        body, content_type=content_type, parser=preset.parser, json_field=preset.json_field
    )


def test_every_sample_has_its_expected_mapping():
    assert sample_files() == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_sample_maps_to_what_its_notes_say(name):
    profile, *expected = EXPECTED[name]
    mapped = document_map(PRESETS[profile].field_map, sample_document(name, profile))
    assert [mapped.name, mapped.email, mapped.phone, mapped.message] == expected


def jotform(answers: dict, pretty: str = "") -> dict:
    """A Jotform delivery's document: the multipart parts and rawRequest's answers."""
    return {
        "formID": "243615086540051",
        "submissionID": "6114090137116205381",
        **answers,
        "pretty": pretty,
    }


def test_jotform_widgets_posted_as_form_fields_are_found_by_shape():
    # Jotform's own form markup posts composites as q3_name[first], q6_phoneNumber[area],
    # q7_address[addr_line1]: one answer each, whatever the question's name.
    document = jotform(
        {
            "q3_name[first]": "Ada",
            "q3_name[last]": "Lovelace",
            "q4_email4": "Ada@Example.COM",
            "q6_phoneNumber[area]": "202",
            "q6_phoneNumber[phone]": "555-0147",
            "q7_address[addr_line1]": "12 St James's Square",
            "q7_address[addr_line2]": "",
            "q7_address[city]": "London",
            "q7_address[postal]": "SW1Y 4LB",
            "q7_address[country]": "United Kingdom",
            "q8_typeA": "Sales",
        }
    )
    mapped = document_map(PRESETS["jotform"].field_map, document)
    assert (mapped.name, mapped.email, mapped.phone) == (
        "Ada Lovelace",
        "Ada@example.com",
        "2025550147",
    )
    assert mapped.fields == {
        "q7_address": "12 St James's Square, London, SW1Y 4LB, United Kingdom",
        "q8_typeA": "Sales",
    }


def test_jotform_labels_in_pretty_name_the_answers():
    document = jotform(
        {
            "q3_studentsName": {"first": "Ada", "middle": "", "last": "Lovelace"},
            "q4_email4": "ada@example.com",
            "q5_input5": "Please call after five.",
            "q6_phoneNumber": {"full": "(202) 555-0147"},
            "q9_name": "Analytical Engines Ltd",
        },
        "Student's Name:Ada Lovelace, E-mail:ada@example.com, Anything else?:Please call "
        "after five., Phone Number:(202) 555-0147, Company Name:Analytical Engines Ltd",
    )
    mapped = document_map(PRESETS["jotform"].field_map, document)
    assert (mapped.name, mapped.email, mapped.phone, mapped.message) == (
        "Ada Lovelace",
        "ada@example.com",
        "2025550147",
        "Please call after five.",
    )
    # q9_name's key says "name", its label a company's: the form's label decides.
    assert mapped.fields == {"Company Name": "Analytical Engines Ltd"}


def test_without_pretty_a_jotform_key_s_own_words_are_its_label():
    document = jotform({"q3_yourName": "Ada Lovelace", "q5_comments": "Hello"})
    mapped = document_map(PRESETS["jotform"].field_map, document)
    assert (mapped.name, mapped.message, mapped.fields) == ("Ada Lovelace", "Hello", {})


def test_an_email_address_is_found_by_its_value_when_only_one_is_sent():
    field_map = PRESETS["jotform"].field_map
    one = jotform({"q3_contact": "ada@example.com", "q4_notes": "hi"})
    assert document_map(field_map, one).email == "ada@example.com"
    same_twice = jotform({"q3_contact": "ada@example.com", "q4_again": "ADA@example.com"})
    assert document_map(field_map, same_twice).email == "ada@example.com"
    two = jotform({"q3_contact": "ada@example.com", "q4_friend": "grace@example.com"})
    assert document_map(field_map, two).email == ""  # not ours to choose
    # Outside the answers (the account's e-mail in a top-level part) is not the contact's.
    outside = {**jotform({"q3_a": "x"}), "username": "owner@example.com"}
    assert document_map(field_map, outside).email == ""


def test_jotform_question_keys_are_read_as_the_labels_they_were_made_from():
    # q<id>_<label in camel case>: without `pretty`, "studentsName" is "students name".
    document = jotform(
        {
            "q3_studentsName": "Ada Lovelace",
            "q5_phoneNumber": "020 7946 0958",
            "q6_anythingElse": "Please call after five.",
        }
    )
    mapped = document_map(PRESETS["jotform"].field_map, document)
    assert (mapped.name, mapped.phone, mapped.message) == (
        "Ada Lovelace",
        "02079460958",
        "Please call after five.",
    )


def test_jotform_composite_widgets_in_raw_request_are_found_by_shape():
    # rawRequest's own form of the widgets: objects, whatever the question is called.
    document = jotform(
        {
            "q3_whoAre": {"first": "Ada", "last": "Lovelace"},
            "q4_where": "ada@example.com",
            "q6_reachYou": {"full": "(202) 555-0147"},
            "q7_deliverTo": {
                "addr_line1": "12 St James's Square",
                "addr_line2": "",
                "city": "London",
                "state": "",
                "postal": "SW1Y 4LB",
                "country": "United Kingdom",
            },
        }
    )
    mapped = document_map(PRESETS["jotform"].field_map, document)
    assert (mapped.name, mapped.email, mapped.phone) == (
        "Ada Lovelace",
        "ada@example.com",
        "2025550147",
    )
    # The address is no contact detail: an extra field, written as one line.
    assert mapped.fields == {
        "q7_deliverTo": "12 St James's Square, London, SW1Y 4LB, United Kingdom"
    }


def tally(*fields: tuple[str, str, object]) -> dict:
    return {
        "eventId": "e",
        "data": {
            "responseId": "r",
            "formId": "f",
            "fields": [
                {"key": f"question_{n}", "label": label, "type": kind, "value": value}
                for n, (label, kind, value) in enumerate(fields)
            ],
        },
    }


def test_tally_fields_are_found_by_type_then_label_never_by_position():
    document = tally(
        ("Company", "INPUT_TEXT", "Analytical Engines Ltd"),
        ("Full name", "INPUT_TEXT", "Ada Lovelace"),
        ("referrer", "HIDDEN_FIELDS", "partner@example.com"),
        ("Work e-mail", "INPUT_TEXT", "ada@example.com"),
        ("Mobile", "INPUT_PHONE_NUMBER", "+442079460958"),
        ("Anything else?", "TEXTAREA", "Hello"),
    )
    mapped = document_map(PRESETS["tally"].field_map, document)
    assert (mapped.name, mapped.email, mapped.phone, mapped.message) == (
        "Ada Lovelace",
        "ada@example.com",
        "+442079460958",
        "Hello",
    )
    # A hidden field's address is the page's, never the respondent's: not taken by value.
    only_hidden = tally(("referrer", "HIDDEN_FIELDS", "partner@example.com"))
    assert document_map(PRESETS["tally"].field_map, only_hidden).email == ""


def test_tally_takes_the_email_and_phone_its_field_types_say():
    # Labels that say nothing and a second address in the form: only the type tells.
    document = tally(
        ("Your name", "INPUT_TEXT", "Ada Lovelace"),
        ("Who told you about us?", "INPUT_TEXT", "grace@example.com"),
        ("Where should we write?", "INPUT_EMAIL", "ada@example.com"),
        ("Best time to call", "INPUT_TEXT", "after 5"),
        ("And on which line?", "INPUT_PHONE_NUMBER", "+442079460958"),
    )
    mapped = document_map(PRESETS["tally"].field_map, document)
    assert (mapped.name, mapped.email, mapped.phone) == (
        "Ada Lovelace",
        "ada@example.com",
        "+442079460958",
    )


def typeform(*answers: tuple[str, str, str, object]) -> dict:
    """A Typeform delivery: (question title, field type, answer type, value) each."""
    fields = [
        {"id": f"f{n}", "title": title, "type": field_type, "ref": f"r{n}"}
        for n, (title, field_type, _, _) in enumerate(answers)
    ]
    given = [
        {"type": kind, kind: value, "field": {"id": f"f{n}", "type": field_type, "ref": f"r{n}"}}
        for n, (_, field_type, kind, value) in enumerate(answers)
    ]
    return {
        "event_id": "e",
        "form_response": {
            "form_id": "f",
            "token": "t",
            "definition": {"fields": fields},
            "answers": given,
        },
    }


def test_typeform_takes_the_email_and_phone_its_answer_types_say():
    document = typeform(
        ("What is your first name?", "short_text", "text", "Ada"),
        ("A colleague who might be interested?", "short_text", "text", "grace@example.com"),
        ("Where should we write?", "email", "email", "ada@example.com"),
        ("And on which line?", "phone_number", "phone_number", "+442079460958"),
    )
    mapped = document_map(PRESETS["typeform"].field_map, document)
    assert (mapped.name, mapped.email, mapped.phone) == (
        "Ada",
        "ada@example.com",
        "+442079460958",
    )
    # The types alone decide, in the finding a source's own map can use too.
    detected = profile_resolve(
        "typeform",
        {
            "field_map": {
                "email": {
                    "detect": "email",
                    "in": "form_response.answers",
                    "type": "field.type",
                    "value": "@type",
                    "id": "field.id",
                }
            }
        },
    )
    assert document_map(detected.field_map, document).email == "ada@example.com"


def test_of_several_long_answers_the_one_labelled_as_a_message_is_the_message():
    document = typeform(
        ("Your name", "short_text", "text", "Ada"),
        ("Is this your first product?", "long_text", "text", "Yes"),
        ("Comments", "long_text", "text", "Please call me after five."),
    )
    mapped = document_map(PRESETS["typeform"].field_map, document)
    assert mapped.message == "Please call me after five."
    # None labelled as one: the first long answer, as before.
    unlabelled = typeform(
        ("Your name", "short_text", "text", "Ada"),
        ("Is this your first product?", "long_text", "text", "Yes"),
        ("Who are your users?", "long_text", "text", "Schools"),
    )
    assert document_map(PRESETS["typeform"].field_map, unlabelled).message == "Yes"


def test_typeform_finds_the_name_by_its_question_and_an_untyped_email_by_value():
    document = {
        "event_id": "e",
        "form_response": {
            "form_id": "f",
            "token": "t",
            "definition": {
                "fields": [
                    {"id": "a1", "title": "Which city?", "type": "short_text", "ref": "r1"},
                    {"id": "a2", "title": "And your name?", "type": "short_text", "ref": "r2"},
                    {"id": "a3", "title": "Where can we write?", "type": "short_text"},
                    {"id": "a4", "title": "Phone", "type": "phone_number", "ref": "r4"},
                ]
            },
            "answers": [
                {"type": "text", "text": "London", "field": {"id": "a1", "type": "short_text"}},
                {"type": "text", "text": "Ada", "field": {"id": "a2", "type": "short_text"}},
                {
                    "type": "text",
                    "text": "ada@example.com",
                    "field": {"id": "a3", "type": "short_text"},
                },
                {
                    "type": "phone_number",
                    "phone_number": "+442079460958",
                    "field": {"id": "a4", "type": "phone_number"},
                },
            ],
        },
    }
    mapped = document_map(PRESETS["typeform"].field_map, document)
    assert (mapped.name, mapped.email, mapped.phone) == ("Ada", "ada@example.com", "+442079460958")


def test_gravity_forms_name_fields_are_found_by_their_inputs_anywhere():
    entry = {
        "id": "9",
        "form_id": "4",
        "created_by": "1",
        "2": "Which plan suits a team of five?",  # id 2 holds no address on this form
        "5.3": "Grace",
        "5.6": "Hopper",
        "7.1": "1 Navy Yard",
        "7.3": "Arlington",
        "7.5": "22202",
        "7.6": "United States",
        "9": "grace@example.com",
    }
    mapped = document_map(PRESETS["gravityforms"].field_map, entry)
    assert (mapped.name, mapped.email) == ("Grace Hopper", "grace@example.com")
    # An address also has inputs 3 and 6 (city, country), but an input 1 as well.
    no_name = {k: v for k, v in entry.items() if not k.startswith("5.")}
    assert document_map(PRESETS["gravityforms"].field_map, no_name).name == ""


def test_a_plain_form_with_its_own_field_names():
    document = parse_body(
        b"full_name=Ada+Lovelace&your_email=ada%40example.com&telephone=020+7946+0958"
        b"&how_can_we_help=A+quote&website=&cf-turnstile-response=tok",
        content_type="application/x-www-form-urlencoded",
        parser="form",
    )
    mapped = document_map(PRESETS["html"].field_map, document)
    assert (mapped.name, mapped.email, mapped.phone, mapped.message) == (
        "Ada Lovelace",
        "ada@example.com",
        "02079460958",
        "A quote",
    )


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ({"is": "email", "of": "a.b"}, None),
        ({"is": "email", "of": ["items", 0, "email"]}, "ada@example.com"),
        ({"is": "phone", "of": "a.First Name"}, None),
    ],
)
def test_is_keeps_a_value_only_when_it_is_what_it_should_be(expression, value):
    assert evaluate(expression, DOC) == value


def test_an_unknown_kind_or_check_is_the_map_s_fault():
    with pytest.raises(MappingError):
        evaluate({"detect": "address"}, DOC)
    with pytest.raises(MappingError):
        evaluate({"is": "url", "of": "a.b"}, DOC)


def test_finding_stays_linear_on_a_hostile_delivery():
    # 3,000 answers and a 60 KB pretty that matches everywhere and nowhere: a
    # quadratic search would take many seconds here.
    answers = {f"q{n}_a": "x" for n in range(3000)}
    documents = [
        jotform(answers, ", ".join("A:x" for _ in range(3000))),
        jotform(answers, ":x" * 30_000),
        jotform({f"q{n}_email": f"a{n}@example.com" for n in range(3000)}, ":" * 60_000),
    ]
    for document in documents:
        started = time.perf_counter()
        document_map(PRESETS["jotform"].field_map, document)
        assert time.perf_counter() - started < 2.0
