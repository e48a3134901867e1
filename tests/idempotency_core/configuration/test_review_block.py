"""The `review` block: validated with its lines, applied as a version with the rest
(kept when a document leaves it out, removed by `review: {}`), exported, restored,
and its webhook refused when it is not https or reaches a private address."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from idempotency_core.configuration.review_block import ReviewSettings, webhook_problem
from idempotency_core.configuration.versions import (
    ConfigInvalidError,
    config_apply,
    config_current,
    config_export,
    config_restore,
)
from idempotency_core.configuration.yamlfile import yaml_load
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import AuditEntry
from tests.factories import make_user

pytestmark = pytest.mark.django_db

REVIEW = {
    "routes": [
        {
            "match": {"source": "shop", "kind": ["suspected_duplicate", "duplicate_held"]},
            "to": "Sales desk",
        },
        {"match": {"kind": "unreadable_submission"}, "to": "Settings admins"},
    ],
    "notify": {"email": True, "digest_minutes": 0, "webhook": ""},
    "escalate": {"after_minutes": 240, "to": "Replay admins"},
}


@pytest.fixture
def shop() -> None:
    from django.contrib.auth.models import Group

    source_get_or_create(name="shop")
    Group.objects.create(name="Sales desk")


def test_the_contracts_block_applies_as_one_audited_version_and_exports(shop: None) -> None:
    config_apply(document={"review": REVIEW}, reason="who receives a case")
    assert config_current().document["review"] == REVIEW
    entry = AuditEntry.objects.get(action="config_applied")
    assert "review.escalate.to added" in entry.details["changes"]
    exported = config_export()
    assert list(exported) == ["sources", "review"]
    assert list(exported["review"]) == ["routes", "notify", "escalate"]
    assert exported["review"] == REVIEW


def test_a_document_without_review_keeps_it_and_an_empty_one_removes_it(shop: None) -> None:
    config_apply(document={"review": REVIEW})
    config_apply(document={"sources": {"shop": {"forms": {"*": {"task": {"title": "Call"}}}}}})
    assert config_current().document["review"] == REVIEW
    config_apply(document={"review": {}})
    assert "review" not in config_current().document


def test_a_restore_brings_the_old_review_block_back(shop: None) -> None:
    admin = make_user("settings-admin", groups=("Settings admins",))
    config_apply(document={"review": REVIEW})
    config_apply(document={"review": {"notify": {"email": False}}})
    config_restore(number=1, actor=admin, reason="back")
    assert config_current().document["review"] == REVIEW


def test_routing_is_first_match_and_reviewers_otherwise() -> None:
    settings = ReviewSettings.of({"review": REVIEW})
    assert settings.route_for(source="shop", form="x", kind="duplicate_held") == "Sales desk"
    assert settings.route_for(source="web", form="x", kind="duplicate_held") == "Reviewers"
    assert settings.route_for(source="shop", form="", kind="unreadable_submission") == (
        "Settings admins"
    )
    assert settings.route_for(source="shop", form="", kind="permanent_failure") == "Reviewers"
    recon = ReviewSettings.of({"review": {"routes": [{"match": {"kind": "recon_*"}, "to": "x"}]}})
    assert recon.route_for(source="", form="", kind="recon_missing") == "x"
    assert not ReviewSettings.of({}).configured


BAD = """\
review:
  routes:
    - match: {source: nowhere, kind: [not_a_kind], colour: red}
      to: Nobody here
  notify:
    email: "yes"
    digest_minutes: -1
    webhook: http://example.com/hook
  escalate:
    after_minutes: 0
  surprise: 1
"""


def test_each_wrong_key_is_named_with_its_line(shop: None, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    document, marks, _problems = yaml_load(BAD)
    with pytest.raises(ConfigInvalidError) as refused:
        config_apply(document=document, marks=marks)
    said = [str(problem) for problem in refused.value.problems]
    expected = [
        ("line 3", "colour"),
        ("line 3", "no source is named 'nowhere'"),
        ("line 3", "'not_a_kind' is not a case kind"),
        ("line 6", "true or false"),
        ("line 7", "from 0 to"),
        ("line 8", "https"),
        ("line 10", "from 1 to"),
        ("line 10", "escalate: needs to"),
        ("line 11", "surprise"),
        ("line 4", "no group or user is named 'Nobody here'"),
    ]
    for line, words in expected:
        assert any(line in text and words in text for text in said), (line, words, said)
    with pytest.raises(CommandError):
        call_command("config", "apply", str(path))
    assert "review" not in config_current().document


@pytest.mark.parametrize(
    "url, refused",
    [
        ("http://hooks.slack.com/services/x", "https"),
        ("https://127.0.0.1/hook", "loopback, private or link-local"),
        ("https://10.1.2.3/hook", "loopback, private or link-local"),
        ("https://169.254.169.254/latest", "loopback, private or link-local"),
        ("https://[::1]/hook", "loopback, private or link-local"),
        ("https://user:pw@8.8.8.8/hook", "user name or password"),
        ("https://localhost/hook", "loopback, private or link-local"),
    ],
)
def test_a_webhook_is_https_to_a_public_address(url: str, refused: str) -> None:
    assert refused in (webhook_problem(url) or "")


def test_an_operator_may_allow_a_private_webhook_for_tests(settings) -> None:
    settings.ONEFOLD_WEBHOOK_ALLOW_PRIVATE = True
    assert webhook_problem("https://127.0.0.1:8443/hook") is None
    assert "https" in (webhook_problem("http://127.0.0.1/hook") or "")
    assert webhook_problem("https://8.8.8.8/hook") is None
