"""The configuration's templates are sandboxed to the values they are given.

No file, no tag library and no debug output can be reached; HTML is autoescaped and
every other kind of text is not; a template can change nothing it is given. Pure
tests of the engine (configuration/templates.py): no database.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from idempotency_core.configuration.templates import (
    template_problem,
    template_render,
    template_values,
)

NAME = "Ann <b>&</b>"


def values() -> dict[str, object]:
    return {
        "contact": {"name": NAME, "first_name": "Ann"},
        "fields": {"company": "O'Neil & Sons", "rooms": [{"name": "kitchen"}]},
        "message": "Hi",
    }


def test_html_is_autoescaped_and_text_is_not() -> None:
    frozen = template_values(values())
    html = template_render("<p>Hello {{ contact.name }}</p>", frozen, html=True)
    text = template_render("Hello {{ contact.name }}", frozen)
    assert html == "<p>Hello Ann &lt;b&gt;&amp;&lt;/b&gt;</p>"
    assert text == f"Hello {NAME}"


@pytest.mark.parametrize(
    "source",
    [
        "{% include '/etc/passwd' %}",
        "{% extends 'base.html' %}",
        "{% load static %}{% static 'x' %}",
        "{% load i18n %}",
        "{% debug %}",
        "{% now 'Y' %}",
        "{% url 'admin:index' %}",
        "{% csrf_token %}",
        "{% autoescape off %}{{ contact.name }}{% endautoescape %}",
        "{{ contact.name|safe }}",
        "{{ fields|pprint }}",
        "{% lorem %}",
    ],
)
def test_what_reaches_beyond_the_values_is_refused(source: str) -> None:
    problem = template_problem(source)
    assert problem is not None and problem.line == 1, source


def test_a_file_named_in_a_template_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    for source in (f"{{% include '{secret}' %}}", f"{{% ssi '{secret}' %}}"):
        assert template_problem(source) is not None
    # Even a template that slipped past validation cannot load it: there is no loader.
    assert "the secret" not in template_render(f"{{{{ '{secret}' }}}}", template_values({}))


def test_a_syntax_error_names_its_template_line() -> None:
    problem = template_problem("Hello\n{{ contact.name }}\n{% for x in fields %}\n")
    assert problem is not None
    assert problem.line == 3
    assert "Unclosed tag" in problem.message and "on line" not in problem.message


def test_a_template_changes_nothing_it_is_given() -> None:
    raw = values()
    frozen = template_values(raw)
    template_render("{{ fields.clear }}{{ contact.clear }}{{ fields.rooms.pop }}", frozen)
    assert raw == values()
    assert template_render("{{ fields.rooms.0.name }}", frozen) == "kitchen"


def test_unknown_names_and_private_attributes_render_empty() -> None:
    frozen = template_values(values())
    assert template_render("[{{ nothing }}{{ contact.nope }}]", frozen) == "[]"
    assert template_problem("{{ contact.__class__ }}") is not None  # Django refuses "_"


def test_the_documented_filters_work() -> None:
    frozen = template_values(values())
    source = (
        "{{ contact.first_name|default:'there' }} {{ fields.service|default:'an enquiry' }} "
        "{{ fields.company|upper }}"
    )
    assert template_render(source, frozen) == "Ann an enquiry O'NEIL & SONS"
