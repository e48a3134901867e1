"""A website's form with a CAPTCHA, in headless Chromium, against the live server.

The form lives on the customer's own site (another origin, on loopback:
tests/support/website.py) and posts to the `html` hook of a source that requires
Turnstile; the provider's siteverify is the stand-in on loopback
(tests/support/siteverify.py). Turnstile's widget cannot be
loaded offline, so the page carries the field the widget fills
(`cf-turnstile-response`) and the test writes into it what the widget would: nothing
(the visitor never solved it), a token the provider refuses, or a good one.

What the visitor sees is the proof: without a good token, the form's error page
("Your message was not sent") with a link back to the form, and nothing kept; with
one, the thank-you page, and the submission processed (one record, one task, one
email, counted in the sandbox). Screenshots under test-artifacts/screenshots/.

Real commits (`transaction=True`): the live server answers from its own thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import Delivery, Event
from tests.support.browser import browser  # noqa: F401 (fixture)
from tests.support.siteverify import SECRET, SiteverifyStandIn
from tests.support.website import Website

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SCREENSHOTS = Path(django_settings.BASE_DIR) / "test-artifacts" / "screenshots"

FORM_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Contact us</title></head>
<body><h1>Contact us</h1>
<form method="post" action="{action}">
  <label>Name <input name="name" required></label>
  <label>Email <input name="email" type="email" required></label>
  <label>Message <textarea name="message" required></textarea></label>
  <!-- What Turnstile's widget adds to the form once the visitor passes it. -->
  <input type="hidden" name="cf-turnstile-response" value="">
  <button type="submit">Send</button>
</form>
<script src="{action}form.js" defer></script>
</body></html>
"""
THANKS_PAGE = "<!doctype html><title>Thanks</title><h1>Thank you!</h1>"


@pytest.fixture
def siteverify(settings) -> Iterator[SiteverifyStandIn]:
    stand_in = SiteverifyStandIn()
    settings.ONEFOLD_CAPTCHA_VERIFY_URL = stand_in.url
    yield stand_in
    stand_in.stop()


@pytest.fixture
def website(tmp_path: Path) -> Iterator[Website]:
    site = Website(tmp_path / "site")
    yield site
    site.stop()


@dataclass
class Visit:
    page: Any
    hook_path: str
    form_url: str
    thanks_url: str
    site_url: str


@pytest.fixture
def visit(browser, live_server, website, _seed_restored) -> Iterator[Visit]:  # noqa: F811
    """A tab, and the customer's contact page whose form posts to a CAPTCHA'd hook."""
    thanks = website.page("thanks.html", THANKS_PAGE)
    source, _ = source_get_or_create(name="captcha-site")
    path = source_hook_configure(
        source=source,
        profile="html",
        thank_you_url=thanks,
        captcha="turnstile",
        captcha_secret=SECRET,
    ).path
    form = website.page("contact.html", FORM_PAGE.format(action=f"{live_server.url}{path}"))
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield Visit(page, path, form, thanks, website.url)
    context.close()


def send(page: Any, token: str, message: str) -> None:
    """Fills the form as a person does, the widget's field as the widget would, sends."""
    page.wait_for_selector('form input[name="submission_id"]', state="attached")
    page.fill('form [name="name"]', "Ada Lovelace")
    page.fill('form [name="email"]', "ada@example.com")
    page.fill('form [name="message"]', message)
    page.eval_on_selector(
        'form [name="cf-turnstile-response"]', "(input, token) => { input.value = token; }", token
    )
    with page.expect_navigation():
        page.click("button[type=submit]")


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def refused(visit: Visit) -> None:
    """The form's error page, a link back to the form (the browser names only the
    site's origin to another one), nothing kept."""
    page = visit.page
    assert visit.hook_path in page.url
    assert page.locator("h1").inner_text() == "Your message was not sent"
    back = page.locator("a", has_text="Go back to the form").get_attribute("href")
    assert back == f"{visit.site_url}/"
    assert not Event.objects.exists()


def test_the_visitor_sees_why_without_a_good_token_and_is_thanked_with_one(
    visit, siteverify, sandbox
):
    page = visit.page
    page.goto(visit.form_url)
    send(page, "", "A quote for twenty units, please.")
    refused(visit)
    shot(page, "captcha_failed_page")
    assert siteverify.requests == []  # no token: the provider is not asked

    page.goto(visit.form_url)
    send(page, "not-a-token-the-provider-gave", "A quote for twenty units, please.")
    refused(visit)
    (asked,) = siteverify.requests
    assert asked["form"]["response"] == "not-a-token-the-provider-gave"

    page.goto(visit.form_url)
    send(page, "pass-from-the-widget", "A quote for twenty units, please.")
    assert page.url == visit.thanks_url and page.locator("h1").inner_text() == "Thank you!"
    (event,) = Event.objects.all()
    outcomes = sorted(Delivery.objects.values_list("outcome", flat=True))
    assert outcomes == ["accepted", "captcha_failed", "captcha_failed"]
    assert "cf-turnstile-response" not in str(event.payload)
    for operation in event.operations.order_by("position"):
        assert operation_execute(operation_id=operation.pk) == "succeeded"
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
