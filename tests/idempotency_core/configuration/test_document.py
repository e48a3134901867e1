"""The configuration file is validated whole: each problem named with its line, nothing
applied while any remains (docs/configuration.md).

Through the real command (`manage.py config apply FILE`) on real files, and through
the service it calls; the versions table is counted to show nothing was written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from idempotency_core.configuration.document import configured_names, document_problems
from idempotency_core.configuration.versions import ConfigInvalidError, config_apply
from idempotency_core.configuration.yamlfile import YamlFileError, yaml_load
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import AuditEntry, BusinessConfigVersion

pytestmark = pytest.mark.django_db

# Every kind of mistake once, each on a line of its own (numbers in the comments).
BROKEN = """\
sources:
  website:
    forms:
      "*":
        enquiry:
          feilds:                                   # 6: unknown key
            company: "{{ fields.company }}"
        task:
          title: "Call {{ contact.name|bogus }}"    # 9: unknown filter
          assignee: {round_robin: []}               # 10: an empty round robin
          due_in_hours: -3                          # 11: not a duration
        confirmation:
          text: |
            Hello,
            {% debug %}
          reply_to: not an address                  # 16
          languages:                                # 17: no language_field
            fr: {subject: "{% if %}"}               # 18: a broken tag
      contact:
        task:
          assignee: {from_field: budget, map: {a: ana}}    # 21: not a value path
        colour: blue                                # 22: unknown section
  nosuch:                                           # 23: no such source
    forms: {}
"""
EXPECTED = [
    (6, "sources.website.forms.*.enquiry.feilds", "unknown key 'feilds'"),
    (9, "sources.website.forms.*.task.title", "template line 1: Invalid filter: 'bogus'"),
    (10, "sources.website.forms.*.task.assignee.round_robin", "must be a list of 1 to 50"),
    (11, "sources.website.forms.*.task.due_in_hours", "must be more than 0"),
    (15, "sources.website.forms.*.confirmation.text", "template line 2: Invalid block tag"),
    (16, "sources.website.forms.*.confirmation.reply_to", "is not one email address"),
    (17, "sources.website.forms.*.confirmation.languages", "need a language_field"),
    (18, "sources.website.forms.*.confirmation.languages.fr.subject", "template line 1"),
    (21, "sources.website.forms.contact.task.assignee.from_field", "must name a value"),
    (22, "sources.website.forms.contact.colour", "unknown key 'colour'"),
    (23, "sources.nosuch", "no source is named 'nosuch'"),
]


@pytest.fixture
def website() -> None:
    source_get_or_create(name="website")


def test_every_problem_is_named_with_its_line_and_nothing_is_applied(
    website: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "onefold.yaml"
    path.write_text(BROKEN)
    with pytest.raises(CommandError, match=r"11 problem\(s\) in .*; nothing applied"):
        call_command("config", "apply", str(path))
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == len(EXPECTED), lines
    for line, (number, where, said) in zip(lines, EXPECTED, strict=True):
        assert line.startswith(f"{path}: line {number}: {where}: "), line
        assert said in line, line
    assert not BusinessConfigVersion.objects.exists()
    assert not AuditEntry.objects.filter(action="config_applied").exists()


def test_a_dry_run_of_a_broken_file_fails_the_same_way(website: None, tmp_path: Path) -> None:
    path = tmp_path / "onefold.yaml"
    path.write_text(BROKEN)
    with pytest.raises(CommandError):
        call_command("config", "apply", str(path), "--dry-run")
    assert not BusinessConfigVersion.objects.exists()


def test_a_file_that_is_not_yaml_names_its_line(website: None, tmp_path: Path) -> None:
    path = tmp_path / "onefold.yaml"
    path.write_text('sources:\n  website:\n    forms: {"*": [\n')
    with pytest.raises(CommandError):
        call_command("config", "apply", str(path))
    with pytest.raises(YamlFileError) as raised:
        yaml_load(path.read_text())
    assert raised.value.problem.line == 4
    assert not BusinessConfigVersion.objects.exists()


def test_a_key_given_twice_is_a_problem_not_the_last_one_silently(website: None) -> None:
    _, _, problems = yaml_load(
        'sources:\n  website:\n    forms:\n      "*":\n        task: {title: a}\n'
        "        task: {title: b}\n"
    )
    assert [(p.line, p.where, p.message) for p in problems] == [
        (6, "sources.website.forms.*.task", "key 'task' given twice")
    ]


def test_a_template_line_in_a_block_is_the_files_line(website: None) -> None:
    text = (
        'sources:\n  website:\n    forms:\n      "*":\n        confirmation:\n'
        "          html: |\n            <p>Hello</p>\n            <p>{{ x|safe }}</p>\n"
    )
    document, marks, _ = yaml_load(text)
    (problem,) = document_problems(document, sources={"website"}, marks=marks)
    assert problem.line == 8
    assert "template line 2: Invalid filter: 'safe'" in problem.message


def test_the_service_refuses_the_same_document_from_the_console(website: None) -> None:
    document = {"sources": {"website": {"forms": {"*": {"task": {"assignee": ["ana"]}}}}}}
    with pytest.raises(ConfigInvalidError) as raised:
        config_apply(document=document, reason="console")
    (problem,) = raised.value.problems
    assert problem.where == "sources.website.forms.*.task.assignee"
    assert problem.line is None  # no file: the place is the path
    assert not BusinessConfigVersion.objects.exists()


@pytest.mark.parametrize(
    "assignee",
    [
        "ana",
        {"round_robin": ["ana", "ben"]},
        {"from_field": "fields.region", "map": {"north": "ana"}, "default": "ben"},
        {"from_field": "contact.email", "map": {}},
    ],
    ids=["name", "round_robin", "from_field", "from_field_no_default"],
)
def test_each_documented_assignee_shape_is_accepted(assignee: object) -> None:
    document = {"sources": {"website": {"forms": {"*": {"task": {"assignee": assignee}}}}}}
    assert document_problems(document, sources={"website"}) == []


@pytest.mark.parametrize(
    ("assignee", "said"),
    [
        ("", "must be a name"),
        ({"round_robin": "ana"}, "must be a list"),
        ({"round_robin": ["ana", 7]}, "must be a name"),
        ({"round_robin": ["ana"], "from_field": "form"}, "either round_robin"),
        ({"from_field": "fields.x", "map": {"a": "ana"}, "fallback": "ben"}, "unknown key"),
        ({"from_field": "fields.x", "map": ["ana"]}, "must be a mapping"),
        (12, "must be a name or a mapping"),
    ],
    ids=["empty", "rr_text", "rr_number", "both", "unknown", "map_list", "number"],
)
def test_each_bad_assignee_shape_is_named(assignee: object, said: str) -> None:
    document = {"sources": {"website": {"forms": {"*": {"task": {"assignee": assignee}}}}}}
    problems = document_problems(document, sources={"website"})
    assert problems and said in problems[0].message, problems


def test_properties_must_be_crm_names_and_never_onefolds_reference() -> None:
    fields = {"Budget__c": "{{ fields.budget }}", "bad name": "x", "external_ref": "x", "n": 3}
    document = {"sources": {"website": {"forms": {"*": {"enquiry": {"fields": fields}}}}}}
    problems = {p.where: p.message for p in document_problems(document, sources={"website"})}
    base = "sources.website.forms.*.enquiry.fields"
    assert set(problems) == {f"{base}.bad name", f"{base}.external_ref", f"{base}.n"}
    assert "quote a number" in problems[f"{base}.n"]


def test_the_names_a_source_uses_in_its_crm_are_listed_for_check_destinations() -> None:
    forms = {
        "*": {
            "enquiry": {"fields": {"amount": "x"}, "pipeline": "default", "stage": "{{ x }}"},
            "contact": {"fields": {"company": "x"}},
            "task": {"assignee": {"round_robin": ["ana", "ben"]}},
        },
        "quote": {
            "enquiry": {"fields": {"budget__c": "x"}},
            "task": {"assignee": {"from_field": "form", "map": {"a": "cy"}, "default": "dee"}},
        },
    }
    names = configured_names({"sources": {"website": {"forms": forms}}}, "website")
    assert names.enquiry_properties == {"amount", "budget__c"}
    assert names.contact_properties == {"company"}
    assert names.assignees == {"ana", "ben", "cy", "dee"}
    assert (names.pipelines, names.stages) == ({"default"}, set())  # a template is not known
    assert configured_names({}, "website").assignees == frozenset()
