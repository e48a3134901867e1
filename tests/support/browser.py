"""Headless Chromium for the console's browser tests: fixtures and the sign-in step.

The same launch as tests/review_console/cases/test_browser.py (the system Chromium; a
missing one fails in CI rather than hiding as a skip). A test module takes the
fixtures by importing them: `from tests.support.browser import browser, page`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import PASSWORD

# Playwright's sync API runs an event loop in this thread; Django's ORM would
# otherwise refuse to be called from the test body after the browser starts.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser(_seed_snapshot: str | None) -> Iterator:
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        message = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)  # a missing install step must not hide as a skip
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server, _seed_restored):
    """A page of a fresh context at a desk's size, on the live server."""
    context = browser.new_context(viewport={"width": 1366, "height": 900}, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


def sign_in(page, username: str, next_url: str = "/console/") -> None:
    page.goto(f"/accounts/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(f"**{next_url}")
