"""Production hardening as an operator meets it: docs/operations.md's environment
passes `check --deploy`, the hardening variables are read under Django's own names
and refuse bad values, every page carries a strict Content-Security-Policy that
the console and Swagger UI live within, Swagger UI comes from the project, and the
staff API's schema needs a staff sign-in.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import drf_spectacular
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from config.urls import SWAGGER_UI_STYLE_HASH
from tests.factories import PASSWORD, make_user, permanent_case

CHROMIUM = "/usr/bin/chromium"


def documented_production_env() -> dict[str, str]:
    """The variables of docs/operations.md's Deployment block, each `<…>` made a random value."""
    page = (Path(settings.BASE_DIR) / "docs" / "operations.md").read_text()
    section = page.split("\n## Deployment\n", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "docs/operations.md's Deployment section has no ```sh block"
    env = {}
    for line in block.group(1).splitlines():
        name, _, value = line.partition("=")
        env[name] = re.sub(r"<[^>]*>", lambda _: secrets.token_urlsafe(50), value)
    return env


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """manage.py with `env` alone (plus PATH), not the test settings' environment."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env={"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def settings_under(env: dict[str, str], *names: str) -> dict[str, object]:
    code = (
        "import json; from django.conf import settings; "
        f"print(json.dumps({{n: getattr(settings, n) for n in {list(names)!r}}}, default=str))"
    )
    result = manage("shell", "-c", code, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- Settings from the environment ------------------------------------------


def test_check_deploy_is_clean_under_the_documented_production_environment() -> None:
    env = documented_production_env()
    assert env["DEBUG"] == "off" and len(env["SECRET_KEY"]) >= 50
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "System check identified no issues" in output, output
    assert "WARNING" not in output


def test_the_hardening_variables_set_djangos_settings_of_the_same_names() -> None:
    env = documented_production_env()
    values = settings_under(
        {**env, "ONEFOLD_LOGIN_LOCKOUT_MINUTES": "2"},
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "CSRF_TRUSTED_ORIGINS",
        "SECURE_PROXY_SSL_HEADER",
        "AXES_COOLOFF_TIME",
        "DEBUG",
    )
    assert values == {
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "CSRF_TRUSTED_ORIGINS": ["https://onefold.example.com"],
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "AXES_COOLOFF_TIME": "0:02:00",
        "DEBUG": False,
    }


def test_the_quick_start_defaults_leave_hardening_off() -> None:
    # Plain HTTP on loopback: a secure cookie would never come back.
    values = settings_under(
        {},
        "SECURE_SSL_REDIRECT",
        "SESSION_COOKIE_SECURE",
        "SECURE_PROXY_SSL_HEADER",
        "ONEFOLD_PASSWORD_RESET",
    )
    assert set(values.values()) == {False, None}


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("SECURE_SSL_REDIRECT", "maybe", "is not a boolean"),
        ("SECURE_HSTS_SECONDS", "a year", "is not an integer"),
        ("SECURE_HSTS_SECONDS", "-1", "below its minimum"),
        ("CSRF_TRUSTED_ORIGINS", "onefold.example.com", "is not an origin"),
        ("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto", "must be HEADER,value"),
        ("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto,https,http", "must be HEADER,value"),
        ("ONEFOLD_LOGIN_LOCKOUT_MINUTES", "0", "below its minimum"),
    ],
)
def test_a_bad_hardening_value_stops_the_process_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, words: str
) -> None:
    # Read the way settings.py reads them, without starting a process per case.
    from django.core.exceptions import ImproperlyConfigured

    from idempotency_core.platform import env

    readers = {
        "SECURE_SSL_REDIRECT": lambda: env.env_bool(name, False),
        "SECURE_HSTS_SECONDS": lambda: env.env_int(name, 0, minimum=0),
        "CSRF_TRUSTED_ORIGINS": lambda: env.env_origins(name),
        "SECURE_PROXY_SSL_HEADER": lambda: env.env_header_pair(name),
        "ONEFOLD_LOGIN_LOCKOUT_MINUTES": lambda: env.env_int(name, 15, minimum=1),
    }
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=words) as refused:
        readers[name]()
    assert name in str(refused.value)


@pytest.mark.parametrize(
    "written",
    ["X-Forwarded-Proto,https", "HTTP_X_FORWARDED_PROTO,https", " x-forwarded-proto , https"],
)
def test_the_proxy_header_may_be_written_as_sent_or_as_djangos_meta_key(
    monkeypatch: pytest.MonkeyPatch, written: str
) -> None:
    from idempotency_core.platform.env import env_header_pair

    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", written)
    assert env_header_pair("SECURE_PROXY_SSL_HEADER") == ("HTTP_X_FORWARDED_PROTO", "https")


# --- Content-Security-Policy --------------------------------------------------


def directives(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {d.split()[0]: d.split()[1:] for d in header.split("; ")}


def test_every_page_carries_a_strict_policy(client: Client, db: None) -> None:
    for path in ["/accounts/login/", "/api/docs/", "/admin/login/"]:
        policy = directives(client.get(path))
        assert policy["default-src"] == ["'self'"], path
        assert policy["script-src"] == ["'self'"], path
        assert policy["frame-ancestors"] == ["'none'"], path
        assert policy["form-action"] == ["'self'"], path
        assert policy["object-src"] == ["'none'"], path
        assert "'unsafe-inline'" not in policy["style-src"], path


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
EVENT_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)


@pytest.fixture
def console_pages(client: Client, db: None) -> Iterator[list[str]]:
    case = permanent_case("csp-page")
    client.force_login(User.objects.create_superuser("sue", password=PASSWORD))
    yield [
        "/console/",
        "/console/cases/",
        f"/console/cases/{case.pk}/",
        "/console/audit/",
        "/console/reconciliation/",
        "/console/api/docs/",
    ]


def test_console_pages_need_nothing_the_policy_refuses(
    client: Client, console_pages: list[str]
) -> None:
    for path in console_pages:
        response = client.get(path)
        assert response.status_code == 200, path
        page = response.content.decode()
        assert not INLINE_SCRIPT.findall(page), path
        assert "<style" not in page or path.endswith("/docs/"), path
        assert not EVENT_HANDLER.findall(page), path
        assert "javascript:" not in page, path
    client.logout()
    for path in ["/accounts/login/", "/accounts/logout/"]:
        page = client.get(path).content.decode()
        assert not INLINE_SCRIPT.findall(page) and "<style" not in page, path


def test_the_swagger_style_hash_matches_the_installed_template() -> None:
    # drf-spectacular's template keeps a small inline <style>; the policy admits it
    # by hash. An upgrade that changes it must change the hash.
    template = Path(drf_spectacular.__file__).parent / "templates/drf_spectacular/swagger_ui.html"
    styles = re.findall(r"<style>(.*?)</style>", template.read_text(), re.S)
    assert len(styles) == 1
    digest = base64.b64encode(hashlib.sha256(styles[0].encode()).digest()).decode()
    assert f"'sha256-{digest}'" == SWAGGER_UI_STYLE_HASH


# --- API docs and schemas --------------------------------------------------------


def test_swagger_ui_is_served_from_the_project(client: Client, db: None) -> None:
    response = client.get("/api/docs/")
    page = response.content.decode()
    assert response.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in assets
    assert all(a.startswith("/") for a in assets), assets  # nothing from another host
    assert SWAGGER_UI_STYLE_HASH in response["Content-Security-Policy"]
    script = client.get("/api/docs/?script")
    assert script.status_code == 200
    assert "/api/schema/" in script.content.decode()
    bundle = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert bundle.status_code == 200


def schema_paths(response) -> set[str]:
    assert response.status_code == 200
    text = response.content.decode()
    return (
        set(json.loads(text)["paths"])
        if text.startswith("{")
        else set(re.findall(r"^  (/\S+):$", text, re.M))
    )


def test_the_public_schema_shows_what_senders_call_and_no_staff_api(
    client: Client, db: None
) -> None:
    paths = schema_paths(client.get("/api/schema/"))
    assert "/api/v1/submissions/" in paths
    assert not [p for p in paths if p.startswith("/console/")]


@pytest.mark.parametrize("path", ["/console/api/schema/", "/console/api/docs/"])
def test_the_staff_schema_and_docs_need_a_staff_sign_in(
    client: Client, db: None, path: str
) -> None:
    anonymous = client.get(path)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/accounts/login/")
    client.force_login(make_user("nora", groups=("Reviewers",), staff=False))
    assert client.get(path).status_code == 403


def test_the_staff_schema_shows_the_staff_api_to_staff(client: Client, db: None) -> None:
    client.force_login(make_user("rita", groups=("Reviewers",)))
    paths = schema_paths(client.get("/console/api/schema/"))
    assert "/console/api/cases/" in paths
    assert "/console/api/cases/{id}/replay/" in paths
    assert not [p for p in paths if p.startswith("/api/")]
    docs = client.get("/console/api/docs/?script").content.decode()
    assert "/console/api/schema/" in docs


# --- In a browser: what the policy would refuse shows in the console -------------


@pytest.fixture(scope="module")
def chromium(_seed_snapshot: str | None) -> Iterator:
    # `_seed_snapshot` first: once Playwright runs, see tests/conftest.py.
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        message = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    # Playwright's sync API runs an event loop in this thread.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser
        browser.close()


@pytest.mark.browser
# live_server needs real commits; serialized_rollback, with `_seed_restored`, leaves the
# seed as the next transactional test (with serialized_rollback) expects it.
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_swagger_ui_and_the_sign_in_pages_render_under_the_policy(
    chromium, live_server, _seed_restored
) -> None:
    context = chromium.new_context(base_url=live_server.url)
    page = context.new_page()
    refused: list[str] = []
    page.on(
        "console",
        lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.on("pageerror", lambda error: refused.append(str(error)))
    try:
        page.goto("/api/docs/")
        page.wait_for_selector("text=/api/v1/submissions/", timeout=15_000)
        assert page.locator(".swagger-ui .info .title").inner_text().startswith("Onefold API")
        page.goto("/accounts/login/")
        # console.css applied: the page's background is the console's, not the default white.
        assert (
            page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(246, 247, 249)"
        )
        for n in range(5):
            page.fill("#id_username", "nobody")
            page.fill("#id_password", f"wrong-{n}")
            page.click("button:has-text('Sign in')")
        assert page.locator("text=Too many failed sign-ins").is_visible()
    finally:
        context.close()
    assert refused == []
