"""A plain website's form, in headless Chromium, posting to the `html` hook of a real server.

The website is served by its own little HTTP server on loopback (another origin,
as a customer's site is): a page with a `<form method="post">` whose action is
the source's hook URL (with its token) and Onefold's `form.js`, and a thank-you
page. The app runs under gunicorn on the test database (`web_server`), so the
browser's posts go over real sockets and are committed for real
(`transaction=True`); the Event and Delivery rows of the source are the proof.

What a person does: double-clicks Send, goes back and sends again, reloads the
form and sends again (all one event: form.js keeps one submission id per filled-in
form in sessionStorage), then sends a different message from the same tab (a
second event). The honeypot `website` stays empty, so nothing is dropped as a bot.
Screenshots of the form and the thank-you page go under the test's tmp dir.

It runs twice: with Chrome's back/forward cache on (what a person's browser does:
Back shows the page as it was left, form.js's hidden input included; Playwright
turns the cache off unless told), and off (Back loads the page again).
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import Delivery, Event, Source

# Playwright's sync API runs an event loop in this thread; Django's ORM would
# otherwise refuse to be called from the test body after the browser starts.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PERSON = {
    "name": "Grace Hopper",
    "email": "grace.hopper@example.com",
    "phone": "+44 20 7946 0958",
    "message": "Could someone call me back about the harbour project?",
}
SECOND_MESSAGE = "A second, different question: do you also cover the north shore?"

FORM_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Contact us - Harbour Builders</title>
  <style>
    body {{ font-family: sans-serif; max-width: 36rem; margin: 2rem auto; }}
    label {{ display: block; margin-top: 0.8rem; }}
    input, textarea {{ width: 100%; padding: 0.4rem; }}
    button {{ margin-top: 1rem; padding: 0.6rem 1.4rem; }}
  </style>
</head>
<body>
  <h1>Contact us</h1>
  <form method="post" action="{action}">
    <label>Name <input name="name" required></label>
    <label>Email <input name="email" type="email" required></label>
    <label>Phone <input name="phone" type="tel"></label>
    <label>Message <textarea name="message" rows="4" required></textarea></label>
    <button type="submit">Send</button>
  </form>
  <script src="{script}" defer></script>
</body>
</html>
"""

THANKS_PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Thank you - Harbour Builders</title></head>
<body><h1>Thank you!</h1><p>We will get back to you soon.</p></body>
</html>
"""


# --- the customer's website: a static site on its own port --------------------------


@dataclass
class Site:
    url: str
    root: Path
    requests: list[str] = field(default_factory=list)


class _QuietHandler(SimpleHTTPRequestHandler):
    def __init__(self, *args, site: Site, **kwargs) -> None:
        self._site = site
        super().__init__(*args, directory=str(site.root), **kwargs)

    def log_message(self, format: str, *args) -> None:
        self._site.requests.append(format % args)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """A plain website (another origin than Onefold), served by http.server in a thread."""
    root = tmp_path / "site"
    root.mkdir()
    holder = Site(url="", root=root)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, site=holder))
    holder.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="website", daemon=True)
    thread.start()
    yield holder
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


# --- the browser, and the migrations' seed data around Playwright ---------------------


class FormScriptNotServed(AssertionError):
    """GET <hook path>form.js did not answer 200: the site's form has no submission id."""


class SubmissionIdReused(AssertionError):
    """The browser sent a new message under an earlier submission id (422 key reused)."""


@dataclass
class Chromium:
    """A launched Chromium, and whether its back/forward cache is on."""

    browser: Any
    back_forward_cache: bool


@pytest.fixture(scope="module")
def playwright(_seed_snapshot: str | None) -> Iterator:
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        message = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)  # a missing install step must not hide as a skip
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as running:
        yield running


@pytest.fixture(
    scope="module",
    params=[
        # What a person's Chrome does: Back restores the page as it was left (Playwright
        # turns the back/forward cache off by default; here it is left on).
        pytest.param(True, id="back-forward-cache"),
        # A page the cache cannot keep: Back loads it again, fields refilled by the browser.
        pytest.param(False, id="page-loaded-again"),
    ],
)
def browser(request: pytest.FixtureRequest, playwright) -> Iterator[Chromium]:
    chromium = playwright.chromium.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
        ignore_default_args=["--disable-back-forward-cache"] if request.param else [],
    )
    yield Chromium(browser=chromium, back_forward_cache=request.param)
    chromium.close()


@dataclass
class Tab:
    """One browser tab, and every post it sent to the hook (the form's fields)."""

    page: Any
    back_forward_cache: bool
    posts: list[dict[str, str]]


@pytest.fixture
def tab(browser: Chromium, _seed_restored: None) -> Iterator[Tab]:
    context = browser.browser.new_context(viewport={"width": 1000, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    # Whether the page on show came from the back/forward cache (as it was left).
    page.add_init_script(
        "window.addEventListener('pageshow', e => { window.__restored = e.persisted; });"
    )
    posts: list[dict[str, str]] = []

    def seen(request) -> None:
        if request.method == "POST" and "/hooks/" in request.url:
            fields = parse_qs(request.post_data or "", keep_blank_values=True)
            posts.append({name: values[-1] for name, values in fields.items()})

    page.on("request", seen)
    yield Tab(page=page, back_forward_cache=browser.back_forward_cache, posts=posts)
    context.close()


def shot(page, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# --- the scenario ---------------------------------------------------------------------


def html_source(site: Site, web_url: str) -> tuple[Source, str]:
    """An `html` source whose thank-you page is on the site; writes the site's pages."""
    source, _ = source_get_or_create(name="harbour-website")
    setup = source_hook_configure(
        source=source, profile="html", thank_you_url=f"{site.url}/thanks.html"
    )
    assert setup.path.startswith("/hooks/harbour-website/t/") and setup.path.endswith("/")
    hook_url = f"{web_url}{setup.path}"
    (site.root / "contact.html").write_text(
        FORM_PAGE.format(action=hook_url, script=f"{hook_url}form.js")
    )
    (site.root / "thanks.html").write_text(THANKS_PAGE)
    script = httpx.get(f"{hook_url}form.js", timeout=10)
    if script.status_code != 200:
        raise FormScriptNotServed(f"GET <hook path>form.js answered {script.status_code}")
    return source, hook_url


def fill(page, message: str) -> None:
    # A person types into the visible fields; form.js has added its own two.
    page.wait_for_selector('form input[name="submission_id"]', state="attached")
    for name in ("name", "email", "phone"):
        page.fill(f'form [name="{name}"]', PERSON[name])
    page.fill('form [name="message"]', message)
    assert page.input_value('form input[name="website"]') == ""  # the honeypot: untouched


def landed(page, site: Site) -> None:
    """Waits for the answer to the post: the thank-you page, or the hook's own answer."""
    page.wait_for_url(lambda url: "/hooks/" in url or url == f"{site.url}/thanks.html")
    page.wait_for_load_state()
    if page.url == f"{site.url}/thanks.html":
        return
    answer = page.locator("body").inner_text()
    if "idempotency_key_reused" in answer:
        raise SubmissionIdReused(answer)
    raise AssertionError(f"the post was answered at {page.url}: {answer}")


def send(page, site: Site) -> None:
    page.click("button[type=submit]")
    landed(page, site)


def back_to_the_form(tab: Tab, form_url: str) -> None:
    """The browser's Back button, from the thank-you page to the form."""
    page = tab.page
    # A page restored from the back/forward cache fires no load event: wait for less.
    page.go_back(wait_until="commit")
    page.wait_for_url(form_url, wait_until="commit")
    page.wait_for_selector('form input[name="submission_id"]', state="attached")
    restored = page.evaluate("window.__restored === true")
    assert restored == tab.back_forward_cache, "the page did not come back as this case needs"


def events_of(source: Source) -> list[Event]:
    return list(Event.objects.filter(source=source).order_by("received_at"))


def double_click_lands_once(
    tab: Tab, site: Site, source: Source, form_url: str, screenshots: Path
) -> str:
    """a. Fill in the form and double-click Send: the thank-you page, one event.
    Returns the submission id the browser sent."""
    page = tab.page
    page.goto(form_url)
    fill(page, PERSON["message"])
    shot(page, screenshots, "html-form-filled")
    page.dblclick("button[type=submit]")
    landed(page, site)
    assert page.locator("h1").inner_text() == "Thank you!"
    shot(page, screenshots, "html-form-thanks")
    events = events_of(source)
    assert len(events) == 1, [e.key for e in events]
    first_id = tab.posts[0]["submission_id"]
    assert first_id and events[0].key == f"html:-:{first_id}"
    assert {p["submission_id"] for p in tab.posts} == {first_id}
    payload = events[0].payload or {}
    assert payload["contact"] == {
        "name": PERSON["name"],
        "email": PERSON["email"],
        "phone": "+442079460958",  # normalised as the JSON API's would be
    }
    assert payload["message"] == PERSON["message"]

    return str(first_id)


def honeypot_left_empty(tab: Tab, source: Source) -> list[str]:
    """d. A person never fills the honeypot: every post carried it empty, and every
    delivery was accepted or replayed; none was dropped as a bot's."""
    assert tab.posts and all(p.get("website") == "" for p in tab.posts)
    outcomes = list(
        Delivery.objects.filter(source=source).order_by("pk").values_list("outcome", flat=True)
    )
    assert outcomes.count("accepted") == 2, outcomes
    assert set(outcomes) == {"accepted", "replayed"}, outcomes
    assert len(outcomes) == len(tab.posts), (outcomes, tab.posts)
    return outcomes


def test_a_person_on_a_plain_website_makes_one_event_per_submission(
    tab: Tab, site: Site, web_server, tmp_path: Path
):
    page = tab.page
    screenshots = tmp_path / "screenshots"
    source, _ = html_source(site, web_server.url)
    form_url = f"{site.url}/contact.html"

    first_id = double_click_lands_once(tab, site, source, form_url, screenshots)

    # b. Back, then the same content again: the same submission id, still one event.
    back_to_the_form(tab, form_url)
    fill(page, PERSON["message"])
    send(page, site)
    assert tab.posts[-1]["submission_id"] == first_id
    assert len(events_of(source)) == 1

    # ...and the form page reloaded, the same content once more: still one event.
    page.goto(form_url)
    page.reload()
    fill(page, PERSON["message"])
    send(page, site)
    assert tab.posts[-1]["submission_id"] == first_id
    assert len(events_of(source)) == 1

    # c. A different message from the same tab (Back to the form, message changed):
    # a genuine second submission, a second event.
    back_to_the_form(tab, form_url)
    fill(page, SECOND_MESSAGE)
    send(page, site)
    second_id = tab.posts[-1]["submission_id"]
    assert second_id and second_id != first_id
    events = events_of(source)
    assert len(events) == 2, [e.key for e in events]
    assert events[1].key == f"html:-:{second_id}"
    assert (events[1].payload or {})["message"] == SECOND_MESSAGE

    outcomes = honeypot_left_empty(tab, source)
    print(f"\nposts: {len(tab.posts)}; outcomes: {outcomes}; screenshots: {screenshots}")
