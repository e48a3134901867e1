"""The quick start, as a newcomer meets it: `make run` from nothing, on the embedded
PostgreSQL, then the README's curl, the console, a second run, and Ctrl-C.

Black box: the stack runs with a fresh ONEFOLD_DATA_DIR and no DATABASE_URL (none
of the suite's settings either), and everything is read from what it prints and
what it serves. "Nothing left running" is checked over every process in /proc,
not only the ones the test started.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings

from tests.support.leftovers import left_behind
from tests.support.processes import REPO, free_port, wait_for

pytestmark = pytest.mark.slow

# initdb, the migrations of a new database, then four processes: on a loaded 2-core
# machine this takes far longer than on an idle one.
BOX_TIMEOUT = 300
# The machine's PostgreSQL, for a stack given a database of its own there.
MAINTENANCE_URL = "postgres://{USER}@{HOST}:{PORT}/postgres".format(**settings.DATABASES["default"])


def quickstart_env(data_dir: Path, database: str = "") -> dict[str, str]:
    """The environment of a newcomer's shell: none of the suite's database or timings
    (config/test_settings.py puts them in this process's environment); `database`, a
    URL, instead of the embedded server."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DATABASE_", "ONEFOLD_", "PYTEST_"))
        and name not in {"DJANGO_SETTINGS_MODULE", "LOG_FORMAT"}
    }
    # LOG_FORMAT: the log goes to a file, where it would be JSON lines; a terminal gets these.
    env |= {"DATABASE_URL": database} if database else {}
    return env | {"ONEFOLD_DATA_DIR": str(data_dir), "LOG_FORMAT": "plain"}


@dataclass(frozen=True)
class Credentials:
    console: str
    username: str
    password: str
    api_key: str


@dataclass
class Stack:
    """One `make run` (or `manage.py run_stack`), leading its own process group as a
    shell's foreground job does."""

    process: subprocess.Popen[bytes]
    log_path: Path
    data_dir: Path
    web: int
    http: int
    smtp: int

    @classmethod
    def start(cls, data_dir: Path, log_path: Path, *, via_make: bool, database: str = "") -> Stack:
        web, http, smtp = free_port(), free_port(), free_port()
        if via_make:
            command = ["make", "-s", "run", f"PORT={web}", f"SANDBOX_PORTS={http},{smtp}"]
        else:
            command = [
                sys.executable,
                "manage.py",
                "run_stack",
                "--addr",
                f"127.0.0.1:{web}",
                "--sandbox-ports",
                f"{http},{smtp}",
            ]
        # Started as from a terminal, where Ctrl-C is not ignored: a child inherits an
        # ignored SIGINT (make would then ignore it too), a handled one starts as default.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            process = subprocess.Popen(
                command,
                cwd=REPO,
                env=quickstart_env(data_dir, database),
                stdout=log_path.open("w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            signal.signal(signal.SIGINT, previous)
        return cls(process, log_path, data_dir, web, http, smtp)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def box(self) -> str:
        """Waits for the credentials box, the last thing printed once all is ready."""

        def printed() -> str | None:
            found = re.search(r"^(=+)\nConsole .*?^\1$", self.log(), re.M | re.S)
            if found:
                return found.group(0)
            if self.process.poll() is not None:
                raise AssertionError(f"the stack exited before it was ready:\n{self.log()}")
            return None

        try:
            return wait_for(printed, timeout=BOX_TIMEOUT, interval=0.5, what="the box")
        except TimeoutError:
            print(self.log())
            raise

    def sandbox_stats(self) -> tuple[int, int, int]:
        stats = httpx.get(f"http://127.0.0.1:{self.http}/_sandbox/stats?detail=0").json()
        return stats["records"], stats["tasks"], stats["messages"]

    def marks(self) -> tuple[str, ...]:
        """What the command line of this run's processes names: its ports."""
        return (f"127.0.0.1:{self.web}", f"--http-port {self.http}", f"PORT={self.web}")

    def postgres_pid(self) -> int:
        return int((self.data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])

    def ctrl_c(self) -> int:
        """SIGINT to the foreground group, as the terminal sends it; the exit status."""
        if self.process.poll() is not None:
            print(self.log())
            return self.process.returncode
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            raise
        finally:
            print(self.log())


def credentials(box: str) -> Credentials:
    def field(label: str) -> str:
        found = re.search(rf"^{label}\s+(\S+)", box, re.M)
        assert found, f"no {label} in the box:\n{box}"
        return found.group(1)

    key = re.search(r"^KEY=(\S+)$", box, re.M)
    assert key, f"no KEY= line in the box:\n{box}"
    assert field("API key") == key.group(1)
    return Credentials(field("Console"), field("Username"), field("Password"), key.group(1))


def submit(stack: Stack, key: str, idempotency_key: str) -> httpx.Response:
    """The README's curl."""
    return httpx.post(
        f"{stack.url}/api/v1/submissions/",
        json={
            "form": "contact",
            "contact": {"name": "Ada Lovelace", "email": "ada@example.com"},
            "message": "Please quote for a kitchen refit.",
        },
        headers={"Authorization": f"Api-Key {key}", "Idempotency-Key": idempotency_key},
        timeout=30,
    )


def signed_in(stack: Stack, username: str, password: str) -> httpx.Client:
    client = httpx.Client(base_url=stack.url, timeout=30)
    form = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token, form.text
    answer = client.post(
        "/accounts/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token.group(1)},
    )
    assert answer.status_code == 302 and answer.headers["location"] == "/console/", answer.text
    return client


def assert_nothing_left(stack: Stack, postgres: int) -> None:
    def remaining() -> list:
        return left_behind(data_dir=stack.data_dir, marks=stack.marks(), postgres=postgres)

    try:
        wait_for(lambda: not remaining(), timeout=10, what="every process to be gone")
    except TimeoutError:
        raise AssertionError("left running:\n" + "\n".join(map(str, remaining()))) from None
    for port in (stack.web, stack.http, stack.smtp):
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("quickstart") / "var"


@pytest.fixture(scope="module")
def first_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`make run` on a data directory that does not exist yet."""
    assert not data_dir.exists()
    stack = Stack.start(data_dir, tmp_path_factory.mktemp("logs") / "first.log", via_make=True)
    yield stack
    if stack.process.poll() is None:
        stack.ctrl_c()


def test_the_box_comes_last_with_credentials_that_work(first_run):
    box = first_run.box()
    assert first_run.log().rstrip().endswith(box)  # printed last: nothing after it
    found = credentials(box)
    assert found.console == f"{first_run.url}/console/"
    assert "new database" in first_run.log()  # the embedded server, initialised here
    # The README's curl, then exactly one effect of each kind at the destination.
    accepted = submit(first_run, found.api_key, "order-form-0001")
    assert accepted.status_code == 202, accepted.text
    wait_for(lambda: first_run.sandbox_stats() == (1, 1, 1), timeout=60, what="three effects")
    time.sleep(2)  # a second email or record would have arrived by now
    assert first_run.sandbox_stats() == (1, 1, 1)
    # The console, signed in with the printed password.
    console = signed_in(first_run, found.username, found.password)
    assert console.get("/console/").status_code == 200
    assert console.get("/console/cases/").status_code == 200
    search = console.get("/console/search/", params={"q": "Lovelace"}, follow_redirects=True)
    assert search.status_code == 200
    # The demo's data is the demo user's own: contact details unmasked.
    assert "ada@example.com" in search.text


def test_the_secret_key_warning_is_printed_once(first_run):
    first_run.box()
    assert first_run.log().count("onefold.W001") == 1, first_run.log()


def test_a_second_run_reuses_the_database_and_ctrl_c_leaves_nothing_running(
    first_run, data_dir, tmp_path
):
    old = credentials(first_run.box())
    postgres = first_run.postgres_pid()
    # make, interrupted, waits for its command and then dies of the same signal.
    assert first_run.ctrl_c() == -signal.SIGINT
    assert first_run.log().rstrip().endswith("Stopped.")
    assert_nothing_left(first_run, postgres)

    second = Stack.start(data_dir, tmp_path / "second.log", via_make=False)
    try:
        box = second.box()
        # Nothing secret on disk, so nothing to show: the box says how to get new ones.
        assert "KEY=" not in box and old.password not in second.log()
        assert "manage.py demo_setup --new-credentials" in box and "make reset" in box
        assert "new database" not in second.log()
        # Same database, same sandbox data: the first run's submission is there.
        replay = submit(second, old.api_key, "order-form-0001")
        assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
        assert second.sandbox_stats() == (1, 1, 1)

        # A third run on the same data while this one runs: refused, and this one's
        # database is left running.
        third = Stack.start(data_dir, tmp_path / "third.log", via_make=False)
        assert third.process.wait(timeout=120) == 1
        assert "in use by process" in third.log()
        assert httpx.get(f"{second.url}/readyz", timeout=10).status_code == 200

        fresh = subprocess.run(
            [sys.executable, "manage.py", "demo_setup", "--new-credentials"],
            cwd=REPO,
            env=quickstart_env(data_dir),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert fresh.returncode == 0, fresh.stderr
        key = re.search(r"^KEY=(\S+)$", fresh.stdout, re.M).group(1)
        password = re.search(r"password: (\S+)$", fresh.stdout, re.M).group(1)
        assert submit(second, old.api_key, "order-form-0002").status_code == 401
        assert submit(second, key, "order-form-0002").status_code == 202
        wait_for(lambda: second.sandbox_stats() == (2, 2, 2), timeout=60, what="the second")
        assert signed_in(second, old.username, password).get("/console/").status_code == 200
        postgres = second.postgres_pid()
    finally:
        assert second.ctrl_c() == 0
    assert_nothing_left(second, postgres)


CONSOLE_PAGES = (
    "/console/",
    "/console/cases/",
    "/console/cases/?status=open",
    "/console/search/?q=ada",
    "/console/audit/",
    "/console/sources/",
    "/console/cases/?kind=permanent_failure",
    "/console/bulk-replays/",
    "/console/notifications/",
    "/console/cases/?status=resolved",
)


def connections_to(database: str) -> int:
    with psycopg.connect(MAINTENANCE_URL, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def own_database(worker_id: str) -> Iterator[str]:
    """A database of the machine's PostgreSQL for one stack, dropped after."""
    name = f"onefold_quickstart_{worker_id}_{os.getpid()}"
    with psycopg.connect(MAINTENANCE_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(MAINTENANCE_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def browse(stack: Stack, login: Credentials) -> list[int]:
    """One browser: one kept-alive connection, a sign-in, then ten console pages."""
    client = signed_in(stack, login.username, login.password)
    try:
        return [client.get(page).status_code for page in CONSOLE_PAGES]
    finally:
        client.close()


def test_the_quick_start_holds_few_connections_however_many_browsers_it_served(
    own_database, tmp_path
):
    """120 signed-in browsers, 8 at a time, against `make run`'s stack on a database of
    its own: no 500, and afterwards no more connections than a few over those at rest."""
    url = MAINTENANCE_URL.rsplit("/", 1)[0] + f"/{own_database}"
    stack = Stack.start(tmp_path / "var", tmp_path / "stack.log", via_make=False, database=url)
    try:
        login = credentials(stack.box())
        at_rest = connections_to(own_database)
        with ThreadPoolExecutor(max_workers=8) as pool:
            statuses = [
                status
                for answers in pool.map(lambda _: browse(stack, login), range(120))
                for status in answers
            ]
        assert len(statuses) == 120 * len(CONSOLE_PAGES)
        assert set(statuses) == {200}, Counter(statuses)
        time.sleep(2)  # the last requests' connections close as they end
        after = connections_to(own_database)
        print(f"connections: {at_rest} at rest, {after} after 120 browsers")
        assert after <= 12 and after <= at_rest + 2, (at_rest, after)
    finally:
        assert stack.ctrl_c() == 0
