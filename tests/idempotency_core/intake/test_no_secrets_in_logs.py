"""No secret, signature or personal data of a sender's delivery reaches a log.

Real parts (gunicorn, a django-q2 cluster, the sandbox, PostgreSQL): deliveries to
hooks of several presets, refused (forged signature or token, stale, malformed,
unknown source) and accepted (with the provider's repeat), each carrying its own
planted email address and message, each source its own secrets. Then every log
the run wrote is searched: the web server's, the cluster's, the sandbox's and
PostgreSQL's server log (the part written during the test). None may hold a
secret, a path token, a signature value sent, or a planted address or message.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from idempotency_core.intake.ingest import event_status
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import Operation
from tests.support.logs import (
    LogNotFoundError,
    LogWindow,
    postgresql_log_path,
    postgresql_log_probe,
)
from tests.support.processes import Child, Sandbox, WebServer, wait_for
from tests.support.senders import SAMPLES, Sample, signed_headers

pytestmark = [
    pytest.mark.slow,
    # The cluster and gunicorn commit for real.
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

IN_CI = os.environ.get("CI") == "true"
PROFILES = ("generic", "typeform", "webflow", "html")


@dataclass
class Planted:
    """Everything that must never be found in a log, by what it is."""

    values: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def plant(self, kind: str, value: str) -> str:
        with self.lock:  # senders run in threads
            self.values[f"{kind} {len(self.values)}"] = value
        return value

    def marker(self, kind: str) -> str:
        """A unique hex string: found in a log however the text around it is encoded."""
        return self.plant(kind, uuid.uuid4().hex)

    def contact(self) -> tuple[str, str]:
        """A planted email address and message for one delivery."""
        email = f"leak-{self.marker('email address')}@example.com"
        return email, f"Leak test message {self.marker('message')}"

    def sent(self, headers: dict[str, str]) -> None:
        """A signature header's value, and the digest inside it on its own."""
        for name, value in headers.items():
            if "signature" in name.lower():
                self.plant(f"{name} value", value)
                digest = value.rpartition("v1=")[2].removeprefix("sha256=").rstrip("=")
                self.plant(f"{name} digest", digest)


# -- bodies: each provider's own shape, carrying the planted contact ---------------


def generic_body(email: str, message: str) -> bytes:
    document = {"form": "contact", "contact": {"name": "Leak Tester", "email": email}}
    return json.dumps({**document, "message": message}).encode()


def typeform_body(email: str, message: str) -> bytes:
    document = json.loads(SAMPLES["typeform"].body)
    response = document["form_response"]
    response["token"] = uuid.uuid4().hex
    for answer in response["answers"]:
        if answer["type"] == "email":
            answer["email"] = email
        if answer["field"]["type"] == "long_text":
            answer["text"] = message
    return json.dumps(document).encode()


def webflow_body(email: str, message: str) -> bytes:
    document = json.loads(SAMPLES["webflow"].body)
    document["payload"]["id"] = uuid.uuid4().hex
    document["payload"]["data"].update({"email": email, "Message": message})
    return json.dumps(document).encode()


def html_body(email: str, message: str) -> bytes:
    fields = {"name": "Leak Tester", "email": email, "message": message, "website": ""}
    return urlencode({**fields, "submission_id": str(uuid.uuid4())}).encode()


BODIES: dict[str, Callable[[str, str], bytes]] = {
    "generic": generic_body,
    "typeform": typeform_body,
    "webflow": webflow_body,
    "html": html_body,
}


# -- hooks and deliveries ----------------------------------------------------------


@dataclass(frozen=True)
class Hook:
    profile: str
    url: str
    secret: str
    token: str


def hook_source(profile: str, base: str, planted: Planted) -> Hook:
    secret = planted.plant(f"{profile} secret", f"leak-secret-{uuid.uuid4().hex}")
    source, _ = source_get_or_create(name=f"leak-{profile}")
    setup = source_hook_configure(source=source, profile=profile, secrets=[secret])
    if setup.token:
        planted.plant(f"{profile} path token", setup.token)
    return Hook(profile=profile, url=base + setup.path, secret=secret, token=setup.token)


def send(
    client: httpx.Client,
    hook: Hook,
    body: bytes,
    planted: Planted,
    *,
    secret: str = "",
    age: float = 0.0,
    url: str = "",
) -> httpx.Response:
    """`body` as the hook's provider sends it, signed for the URL it is posted to."""
    sample = SAMPLES[hook.profile]
    # The generic sender's id is its Idempotency-Key: one per body, so a repeat keeps it.
    ids = (("Idempotency-Key", hashlib.sha256(body).hexdigest()[:32]),)
    delivery = Sample(
        hook.profile,
        body,
        sample.content_type,
        ("", "", ""),
        sign=sample.sign,
        extra_headers=ids if hook.profile == "generic" else (),
    )
    target = url or hook.url
    headers = signed_headers(delivery, secret or hook.secret, target, age=age)
    planted.sent(headers)
    return client.post(target, content=body, headers=headers)


def refused_deliveries(client: httpx.Client, hook: Hook, planted: Planted) -> None:
    """Forged, stale, unreadable and malformed deliveries, each with its own planted
    contact."""
    sample, build = SAMPLES[hook.profile], BODIES[hook.profile]
    if sample.sign is not None:
        forged = send(client, hook, build(*planted.contact()), planted, secret="x" * 32)
    else:
        wrong = hook.url.replace(hook.token, "not-the-token")
        forged = send(client, hook, build(*planted.contact()), planted, url=wrong)
    assert forged.status_code == 401, forged.text
    if sample.signs_timestamp:
        stale = send(client, hook, build(*planted.contact()), planted, age=600)
        assert stale.status_code == 401, stale.text
    email, message = planted.contact()
    # Not an address: verified and parsed, so kept unreadable for a corrected map, and
    # its case names what could not be read, never the value.
    invalid = build(email.replace("@", "-at-"), message)
    assert send(client, hook, invalid, planted).status_code == 202
    if hook.profile != "html":  # a form body has no syntax to break
        email, message = planted.contact()
        broken = json.dumps({"contact": {"email": email}, "message": message})[:-1].encode()
        assert send(client, hook, broken, planted).status_code == 400


def accepted_delivery(client: httpx.Client, hook: Hook, planted: Planted) -> str:
    """One accepted delivery and the provider's repeat of it; the event id."""
    body = BODIES[hook.profile](*planted.contact())
    first = send(client, hook, body, planted)
    assert first.status_code == 200, first.text
    again = send(client, hook, body, planted)
    assert again.status_code == 200 and again.json() == first.json(), again.text
    return str(first.json()["event_id"])


def unknown_source(client: httpx.Client, base: str, planted: Planted) -> None:
    hook = Hook("generic", f"{base}/hooks/leak-nobody-{uuid.uuid4().hex}/", "y" * 32, "")
    body = generic_body(*planted.contact())
    # The same 401 as a wrong credential: no answer tells which sources exist.
    assert send(client, hook, body, planted).status_code == 401


def events_done() -> bool:
    statuses: dict[str, list[str]] = {}
    for event_id, status in Operation.objects.values_list("event_id", "status"):
        statuses.setdefault(str(event_id), []).append(status)
    return bool(statuses) and all(event_status(s) != "processing" for s in statuses.values())


# -- the logs ----------------------------------------------------------------------


def log_or_fail(find: Callable[[], LogWindow]) -> LogWindow:
    """A log the test must read; its absence fails under CI, else skips, saying why."""
    try:
        return find()
    except LogNotFoundError as exc:
        if IN_CI:
            pytest.fail(f"cannot search a log the stack writes: {exc}")
        pytest.skip(f"cannot search a log the stack writes: {exc}")


@contextmanager
def logs_written(sandbox: Sandbox, tmp_path: Path) -> Iterator[dict[str, Callable[[], str]]]:
    """Opens the shared logs where they end now; yields readers of everything the run
    wrote, by name (the children started for this test log under tmp_path)."""
    postgresql = log_or_fail(lambda: LogWindow.open(postgresql_log_path()))
    sandbox_log = LogWindow.open(sandbox.child.log_path)
    readers: dict[str, Callable[[], str]] = {
        "postgresql": postgresql.read,
        "sandbox": sandbox_log.read,
    }
    yield readers
    for path in sorted(tmp_path.rglob("*.log")):
        readers[path.name] = lambda path=path: path.read_text(errors="replace")


def stop(children: list[Child]) -> None:
    """Stops the stack so that every log is complete before it is read (SIGINT, as
    Ctrl-C: each process's orderly shutdown)."""
    for child in children:
        child.stop(signal.SIGINT, timeout=20)


def leaks(readers: dict[str, Callable[[], str]], planted: Planted) -> list[str]:
    found = []
    for log, read in readers.items():
        text = read()
        for what, value in planted.values.items():
            for line in (line for line in text.splitlines() if value in line):
                found.append(f"{what} ({value!r}) in the {log} log: {line[:300]}")
    return found


def assert_the_logs_were_read(readers: dict[str, Callable[[], str]], probe: str) -> None:
    """The search was over the right files: each holds what the run is known to log."""
    assert probe in readers["postgresql"](), "the PostgreSQL log read is not the server's"
    assert "Unauthorized: /hooks/leak-" in readers["web.log"](), readers["web.log"]()[-2000:]
    assert "running" in readers["qcluster.log"](), readers["qcluster.log"]()[-2000:]
    assert "sandbox" in readers


# -- the scenarios -----------------------------------------------------------------


def test_no_secret_signature_or_personal_data_reaches_a_log(
    sandbox: Sandbox, web_server: WebServer, qcluster_factory, tmp_path: Path
):
    planted = Planted()
    cluster = qcluster_factory()
    with logs_written(sandbox, tmp_path) as readers:
        with httpx.Client(timeout=30) as client:
            hooks = [hook_source(p, web_server.url, planted) for p in PROFILES]
            for hook in hooks:
                refused_deliveries(client, hook, planted)
                accepted_delivery(client, hook, planted)
            unknown_source(client, web_server.url, planted)
        wait_for(events_done, timeout=60, interval=0.2, what="every event's operations")
        stats = sandbox.stats()
        assert (stats["records"], stats["tasks"], stats["messages"]) == (4, 4, 4), stats
        probe = f"onefold-log-probe-{uuid.uuid4().hex}"
        postgresql_log_probe(probe)
        stop([cluster, web_server.child])
    assert_the_logs_were_read(readers, probe)
    found = leaks(readers, planted)
    assert not found, "planted values found in logs:\n" + "\n".join(found)


RACING_PAIRS = 12


def test_a_repeat_racing_its_first_delivery_leaves_no_personal_data_in_a_log(
    sandbox: Sandbox, web_server: WebServer, qcluster_factory, tmp_path: Path
):
    """A provider retrying while its first delivery is still in flight: both reach the
    insert of the event, one loses on the unique constraint."""
    planted = Planted()
    cluster = qcluster_factory()
    with logs_written(sandbox, tmp_path) as readers:
        hook = hook_source("generic", web_server.url, planted)
        bodies = [generic_body(*planted.contact()) for _ in range(RACING_PAIRS)]

        def deliver(body: bytes, barrier: threading.Barrier) -> int:
            with httpx.Client(timeout=30) as client:
                barrier.wait()
                return send(client, hook, body, planted).status_code

        with ThreadPoolExecutor(max_workers=2) as pool:
            for body in bodies:
                barrier = threading.Barrier(2)
                pair = [pool.submit(deliver, body, barrier) for _ in range(2)]
                assert [f.result() for f in pair] == [200, 200]
        wait_for(events_done, timeout=60, interval=0.2, what="every event's operations")
        assert sandbox.stats()["records"] == RACING_PAIRS
        probe = f"onefold-log-probe-{uuid.uuid4().hex}"
        postgresql_log_probe(probe)
        stop([cluster, web_server.child])
    assert probe in readers["postgresql"]()
    found = leaks(readers, planted)
    assert not found, "planted values found in logs:\n" + "\n".join(found)
