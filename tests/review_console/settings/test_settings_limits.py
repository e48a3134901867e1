"""The Settings pages refuse what `config apply` refuses, each a clear 400 naming the
problem at its field, never a 500: a value in a loading attribute of the HTML email,
a size over the cap, YAML with aliases, tags or deep nesting."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from idempotency_core.configuration.versions import config_current
from idempotency_core.models import BusinessConfigVersion
from tests.factories import ingest, make_user

pytestmark = pytest.mark.django_db

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join(['*' + chr(97 + n)] * 9)}]\n" for n in range(8)
)


def admin() -> Client:
    client = Client()
    client.force_login(User.objects.get(pk=make_user("sam", groups=("Settings admins",)).pk))
    return client


def post(**overrides: str) -> dict[str, str]:
    data = {
        "based_on": str(config_current().number),
        "send": "yes",
        "subject": "Thanks",
        "text": "",
        "html": "",
        "reply_to": "",
        "language_field": "fields.lang",
        "languages": "",
        "event": "",
        "reason": "a test",
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("html", '<img src="https://c.example/p.gif?e={{ contact.email|urlencode }}">', "src"),
        ("html", '<a href="https://c.example/?n={{ contact.name }}">us</a>', "href"),
        ("subject", "{{ message|ljust:300000000 }}", "1000"),
        ("text", "{% if 1 %}" * 2000 + "x" + "{% endif %}" * 2000, "nested"),
        ("languages", ALIAS_BOMB, "alias"),
        ("languages", "fr: !!python/name:os.system x\n", "tag"),
        ("languages", "fr: " + "[" * 5000 + "]" * 5000 + "\n", "deep"),
    ],
    ids=["img-src", "a-href", "ljust", "nested-ifs", "alias-bomb", "python-tag", "brackets"],
)
def test_a_refused_draft_is_a_400_naming_it_and_nothing_is_saved(
    source, field: str, value: str, said: str
) -> None:
    client = admin()
    url = reverse("console:settings-save", args=["website", "contact", "confirmation"])
    response = client.post(url, post(**{field: value}))
    assert response.status_code == 400
    assert said in response.content.decode()
    assert not BusinessConfigVersion.objects.exists()
    preview = reverse("console:settings-preview", args=["website", "contact", "confirmation"])
    assert client.post(preview, post(**{field: value})).status_code < 500


@pytest.mark.parametrize(
    ("title", "said"),
    [
        ("{% for a in message %}{% for b in message %}{% endfor %}{% endfor %}", "seconds"),
        ("{% for a in message %}{{ message }}{% endfor %}", "longer than"),
    ],
    ids=["time", "output"],
)
def test_the_preview_renders_within_bounds_of_time_and_output(source, title, said) -> None:
    """A template that passes the checks but would render for long (two loops over a
    long message) is stopped in the preview as in the worker, and said so."""
    user = make_user("sam", groups=("Settings admins",))
    user.user_permissions.add(Permission.objects.get(codename="view_contact_details"))
    client = Client()
    client.force_login(User.objects.get(pk=user.pk))
    ingest("long-1", message="x" * 20_000)
    preview = reverse("console:settings-preview", args=["website", "contact", "task"])
    data = {"based_on": str(config_current().number), "title": title, "event": ""}
    started = time.monotonic()
    response = client.post(preview, {**data, "assignee": "", "due_in_hours": "", "reason": ""})
    assert time.monotonic() - started < 10
    assert response.status_code == 200
    assert said in response.content.decode()
