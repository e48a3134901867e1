"""What each step renders from the configuration and a submission (execution/rendering.py).

Pure tests: a configuration version is built in memory, no database. Without any
configuration the content is exactly what Onefold sent before configuration existed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from idempotency_core.configuration.versions import ConfigVersion
from idempotency_core.execution.confirmations import confirmation_greeting
from idempotency_core.execution.rendering import (
    RenderInput,
    assignee_choose,
    confirmation_render,
    enquiry_render,
    task_render,
)
from integrations.base import DestinationError
from tests.factories import submission

NOW = datetime(2026, 11, 29, 10, 15, tzinfo=UTC)
NONE = ConfigVersion(0, {})


def version(forms: dict[str, Any], number: int = 1) -> ConfigVersion:
    return ConfigVersion(number, {"sources": {"website": {"forms": forms}}})


def inp(refs: dict[str, str] | None = None, **overrides: Any) -> RenderInput:
    return RenderInput(
        payload=submission(**overrides),
        source="website",
        default_assignee="sales",
        refs=refs if refs is not None else {"create_enquiry": "rec_000042"},
        now=NOW,
    )


def no_turn(scope: str) -> int:
    raise AssertionError(f"no round robin here, yet a turn was taken for {scope}")


def counter() -> Any:
    turns: dict[str, int] = {}

    def take(scope: str) -> int:
        turns[scope] = turns.get(scope, 0) + 1
        return turns[scope]

    take.turns = turns  # type: ignore[attr-defined]
    return take


# -- no configuration: what Onefold sent before ---------------------------------------


def test_without_configuration_the_confirmation_is_todays() -> None:
    content = confirmation_render(inp(), NONE, no_turn)
    assert content["subject"] == "We received your enquiry"
    assert content["text"] == (
        "Hello Ada Lovelace,\n\n"
        "Thank you for your enquiry. We have received it and someone will be in touch.\n"
    )
    assert "rec_000042" not in content["text"]  # no CRM id for the customer
    assert (content["html"], content["reply_to"], content["send"]) == (None, None, True)
    assert content["to"] == "ada@example.com" and content["version"] == 0


def test_without_configuration_the_default_greeting_keeps_its_strict_rule() -> None:
    name = "Ann <b>&</b>"
    content = confirmation_render(inp(contact={"name": name, "email": "a@x.io"}), NONE, no_turn)
    assert content["text"].startswith(confirmation_greeting(name) + "\n\n")
    assert content["text"].startswith("Hello,\n")


def test_without_configuration_the_task_and_enquiry_are_todays() -> None:
    task = task_render(inp(), NONE, no_turn)
    assert (task["title"], task["assignee"], task["assignee_rule"], task["due_at"]) == (
        "Follow up contact enquiry",
        "sales",
        "source",
        None,
    )
    enquiry = enquiry_render(inp(), NONE, no_turn)
    assert enquiry["fields"] == {
        "name": "Ada Lovelace",
        "email": "ada@example.com",
        "phone": "+44 20 7946 0000",
        "message": "Please quote for a kitchen refit.",
        "form": "contact",
        "source": "website",
        "submitted_at": "2026-11-29T10:15:00Z",
        "fields": {"budget": "10k"},
    }
    assert (enquiry["properties"], enquiry["contact"], enquiry["pipeline"]) == ({}, {}, "")


# -- configured ------------------------------------------------------------------------

CONFIG = {
    "*": {
        "enquiry": {
            "fields": {"amount": "{{ fields.budget }}", "company": "{{ fields.company }}"},
            "pipeline": "sales",
            "stage": "{{ fields.stage|default:'new' }}",
        },
        "contact": {"fields": {"company": "{{ fields.company|default:'none' }}"}},
        "task": {
            "title": "Call {{ contact.name }} about {{ fields.service|default:'an enquiry' }}",
            "assignee": {"round_robin": ["ana", "ben"]},
            "due_in_hours": 24,
        },
        "confirmation": {
            "subject": "We received your message, {{ contact.first_name|default:'there' }}",
            "text": "Hello {{ contact.name }}, ref {{ reference }}",
            "html": "<p>Hello {{ contact.name }}</p>",
            "reply_to": "office@example.com",
            "languages": {"fr": {"subject": "Merci {{ contact.first_name }}"}},
            "language_field": "fields.lang",
        },
    },
    "newsletter": {"confirmation": {"send": False}},
}


def test_the_enquiry_carries_the_mapped_properties_and_leaves_empty_ones_out() -> None:
    content = enquiry_render(inp(), version(CONFIG), no_turn)
    assert content["properties"] == {"amount": "10k"}  # no company was sent
    assert content["contact"] == {"company": "none"}
    assert (content["pipeline"], content["stage"], content["version"]) == ("sales", "new", 1)


def test_the_task_title_round_robin_and_due_date() -> None:
    take = counter()
    first = task_render(inp(), version(CONFIG), take)
    second = task_render(inp(), version(CONFIG), take)
    third = task_render(inp(), version(CONFIG), take)
    assert first["title"] == "Call Ada Lovelace about an enquiry"
    assert [t["assignee"] for t in (first, second, third)] == ["ana", "ben", "ana"]
    assert take.turns == {"website/*": 3}
    assert first["due_at"] == "2026-11-30T10:15:00+00:00"


def test_the_confirmation_is_templated_escaped_in_html_only_with_its_reply_to() -> None:
    name = "Ann <b>&</b>"
    content = confirmation_render(
        inp(contact={"name": name, "email": "ann@example.com"}), version(CONFIG), no_turn
    )
    assert content["subject"] == "We received your message, Ann"
    assert content["text"] == f"Hello {name}, ref rec_000042"
    assert content["html"] == "<p>Hello Ann &lt;b&gt;&amp;&lt;/b&gt;</p>"
    assert content["reply_to"] == "office@example.com"


@pytest.mark.parametrize(
    ("lang", "subject", "code"),
    [("fr", "Merci Ada", "fr"), ("FR-ca", "Merci Ada", "fr"), ("de", "We received", "")],
)
def test_the_language_field_chooses_a_variant(lang: str, subject: str, code: str) -> None:
    content = confirmation_render(inp(fields={"lang": lang}), version(CONFIG), no_turn)
    assert content["subject"].startswith(subject)
    assert content["language"] == code
    assert content["text"] == "Hello Ada Lovelace, ref rec_000042"  # no French text: default


def test_a_form_block_replaces_the_rest_and_can_turn_the_confirmation_off() -> None:
    content = confirmation_render(inp(form="newsletter"), version(CONFIG), no_turn)
    assert content["send"] is False
    assert content["subject"] == "We received your enquiry"  # "*" is not merged in


@pytest.mark.parametrize(
    "name",
    ["Claim your prize at evil.com", "Call 0800 123 456", "ada@example.com", "x" * 61],
)
def test_a_confirmation_shows_no_visitor_value_that_reads_as_a_link_or_message(name: str) -> None:
    text = "[{{ contact.name }}|{{ fields.note }}|{{ message }}]"
    forms = {"*": {"confirmation": {"text": text}}}
    content = confirmation_render(
        inp(contact={"name": name, "email": "a@x.io"}, fields={"note": name}, message=name),
        version(forms),
        no_turn,
    )
    assert content["text"] == "[||]"


def test_task_titles_see_the_values_as_submitted() -> None:
    forms = {"*": {"task": {"title": "{{ message }}"}}}
    content = task_render(inp(message="Call 0800 123 456 today"), version(forms), no_turn)
    assert content["title"] == "Call 0800 123 456 today"


def test_a_reply_to_that_renders_to_no_address_is_refused() -> None:
    forms = {"*": {"confirmation": {"reply_to": "{{ fields.office }}"}}}
    with pytest.raises(DestinationError, match="not one email address"):
        confirmation_render(inp(fields={"office": "nobody"}), version(forms), no_turn)


@pytest.mark.parametrize(
    ("spec", "values", "expected"),
    [
        ("ana", {}, ("ana", "fixed")),
        (None, {}, ("sales", "source")),
        (
            {"from_field": "fields.region", "map": {"north": "ana"}, "default": "ben"},
            {"fields": {"region": "north"}},
            ("ana", "from_field"),
        ),
        (
            {"from_field": "fields.region", "map": {"north": "ana"}, "default": "ben"},
            {"fields": {"region": "NORTH"}},
            ("ana", "from_field"),
        ),
        (
            {"from_field": "fields.region", "map": {"north": "ana"}, "default": "ben"},
            {"fields": {"region": "south"}},
            ("ben", "from_field"),
        ),
        (
            {"from_field": "form", "map": {"quote": "cy"}},
            {"form": "contact"},
            ("sales", "source"),
        ),
    ],
    ids=["fixed", "none", "mapped", "case", "default", "no_default"],
)
def test_the_assignee_chosen(spec: object, values: dict, expected: tuple[str, str]) -> None:
    assert assignee_choose(spec, values, default="sales", turn=lambda: 1) == expected
