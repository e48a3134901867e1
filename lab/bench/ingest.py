"""The ingest benchmark: Onefold's `POST /api/v1/submissions/` beside a bare insert endpoint.

Starts three gunicorn servers on loopback with the same settings, the same database
and the same number of sync workers: Onefold (`config.wsgi`), a bare DRF endpoint
that inserts one row, and Onefold's ingest service behind that same bare view (both
`bare_wsgi`, a module of the proofs that no product URLconf names; the service's
figure splits Onefold's cost between its service and its API layer). Then, in
interleaved rounds (the order alternates, so drift on a busy machine falls on all),
16 client threads post submissions under distinct keys to each, and it prints the
requests per second of each round, the medians and their ratios to the bare
endpoint's, the CPU a request costs, whether Onefold meets the 0.7x it is held to, and
what 0.7x and the design's 0.8x limit would leave Onefold's server to spend
(`TargetBudget`). The source's rate limit is lifted for
the run.

Then 20 storms: 50 identical requests (one key, one body) released together
against Onefold. Every answer must be 202 or 200 naming one event, and the
database must hold, per storm, one event, its pipeline's operations and 50
deliveries of which one accepted: anything more is counted as a duplicate.

`--profile DIR` also samples Onefold's workers with py-spy (a dev dependency)
during one extra, unmeasured round and prints the functions that held the most
samples. `manage.py bench_ingest` runs it; it refuses a database whose name lacks
"bench".
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection

from idempotency_core.execution.steps import pipeline_for
from idempotency_core.intake.sources import source_api_key_issue, source_get_or_create
from idempotency_core.models import Delivery, Event, Operation, Source
from lab.bench.bare_endpoint import (
    BARE_PATH,
    BARE_TABLE,
    BENCH_SOURCE_NAME,
    SERVICE_PATH,
)
from lab.bench.cpu import cpu_by_pid, cpu_spent, database_backends, descendants
from lab.bench.tables import bench_tables_empty

REPO = Path(settings.BASE_DIR)
INGEST_PATH = "/api/v1/submissions/"
# PositiveIntegerField's largest value: the source's rate is lifted, not removed.
LIFTED_RATE = 2_147_483_647
WORKERS = 4
THREADS = 16
# Onefold's rate as a multiple of the bare endpoint's: what it is held to now, and the
# design's long-term limit with six rows written at ingest.
REQUIRED_RATIO = 0.7
TARGET_RATIO = 0.8
# Where a gunicorn sync worker starts handling one request (py-spy's frame name).
REQUEST_FRAME = "SyncWorker.handle_request (gunicorn/workers/sync.py)"


class BenchmarkError(Exception):
    """The benchmark cannot run here, or a server did not answer as it should."""


def bench_ingest_database_check() -> None:
    name = settings.DATABASES["default"]["NAME"]
    if "bench" not in str(name):
        raise BenchmarkError(
            f"refusing to fill database {name!r}: use one whose name contains 'bench'"
        )


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@dataclass(frozen=True)
class Target:
    """One server and what to post to it: `body(key)` and the status it answers."""

    name: str
    port: int
    path: str
    headers: dict[str, str]
    expected: int
    server_pid: int

    def post(self, key: str) -> tuple[int, bytes]:
        return post(
            self.port, self.path, submission_body(key), {**self.headers, "Idempotency-Key": key}
        )


@dataclass(frozen=True)
class CpuPerRequest:
    """Milliseconds of CPU a request cost during a round, by whom: the server's
    gunicorn processes, PostgreSQL's backends for this database, and this client."""

    server: float
    database: float
    client: float

    @property
    def total(self) -> float:
        return self.server + self.database + self.client

    def __str__(self) -> str:
        return f"{self.server:.2f} + {self.database:.2f} + {self.client:.2f} = {self.total:.2f} ms"


@dataclass(frozen=True)
class TargetBudget:
    """What a target ratio leaves Onefold's server, from one run's CPU figures.

    When the machine's cores are all busy (cores busy = rate x CPU a request, printed
    beside it), requests a second go as 1 / CPU a request, so Onefold at `target` times
    the bare endpoint's rate may spend the bare's CPU a request / `target`, all parts
    included. Its PostgreSQL and client parts beyond the bare's (the rows the design
    writes, the longer answer) come out of that first; what is left is what its server
    may spend beyond the bare server, against what it does spend."""

    target: float
    allowed: float
    beyond_server: float
    server_budget: float
    server_spent: float

    def __str__(self) -> str:
        return (
            f"at {self.target:.2f}x Onefold may spend {self.allowed:.2f} ms of CPU a request "
            f"in all; its PostgreSQL and client parts take {self.beyond_server:.2f} more "
            f"than the bare's, which leaves its server {self.server_budget:.3f} ms beyond "
            f"the bare server's (it spends {self.server_spent:.3f} more)"
        )


def target_budget(bare: CpuPerRequest, onefold: CpuPerRequest, target: float) -> TargetBudget:
    allowed = bare.total / target
    beyond_server = (onefold.database - bare.database) + (onefold.client - bare.client)
    return TargetBudget(
        target=target,
        allowed=allowed,
        beyond_server=beyond_server,
        server_budget=allowed - bare.total - beyond_server,
        server_spent=onefold.server - bare.server,
    )


@dataclass
class RoundResult:
    rate: float
    statuses: Counter[int] = field(default_factory=Counter)
    cpu: CpuPerRequest = CpuPerRequest(0.0, 0.0, 0.0)


def submission_body(key: str) -> bytes:
    """A valid submission; a contact of its own per key, so that no two bench events
    are the same person's same message (which would open suspected-duplicate cases)."""
    return json.dumps(
        {
            "form": "contact",
            "contact": {"name": "Bench Client", "email": f"bench+{key}@example.com"},
            "message": f"Benchmark submission {key}.",
        }
    ).encode()


def post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """One request on a connection of its own (gunicorn's sync workers close each one)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body, {**headers, "Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(
    name: str,
    app: str,
    log_dir: Path,
    *,
    workers: int = WORKERS,
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
) -> Server:
    """gunicorn with `workers` sync workers (one request at a time each), as deployed,
    serving the code of the checkout `cwd`, with `env` added to this process's."""
    port = _free_port()
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                app,
                f"--bind=127.0.0.1:{port}",
                f"--workers={workers}",
                "--worker-class=sync",
                "--backlog=2048",
                "--timeout=120",
            ],
            cwd=cwd,
            env={**os.environ, "LOG_FORMAT": "json", **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(name=name, process=process, port=port, log_path=log_path)
    deadline = time.monotonic() + 60
    while not _answers(server):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise BenchmarkError(f"{name} did not start:\n{server.log()}")
        time.sleep(0.2)
    return server


def _answers(server: Server) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def run_round(target: Target, *, requests: int, tag: str, threads: int = THREADS) -> RoundResult:
    """`requests` posts under distinct keys from `threads` client threads; req/s of the
    whole round (first request sent to last answer read)."""
    numbers = itertools.count()
    result = RoundResult(rate=0.0)
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)

    def client() -> None:
        start.wait()
        while (n := next(numbers)) < requests:
            status, _ = target.post(f"{tag}-{n}")
            with lock:
                result.statuses[status] += 1

    workers = [threading.Thread(target=client, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    before = _cpu_reading(target)
    start.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    result.rate = requests / (time.perf_counter() - began)
    after = _cpu_reading(target)
    result.cpu = CpuPerRequest(
        *(cpu_spent(b, a) * 1000 / requests for b, a in zip(before, after, strict=True))
    )
    unexpected = {s: c for s, c in result.statuses.items() if s != target.expected}
    if unexpected:
        raise BenchmarkError(f"{target.name} answered {unexpected} in round {tag}")
    return result


def _cpu_reading(target: Target) -> list[dict[int, float]]:
    """CPU so far of the server's processes, the database's backends and this process."""
    server = descendants(target.server_pid)
    return [cpu_by_pid(pids) for pids in (server, database_backends(), [os.getpid()])]


def migrations_apart(here: Path, there: Path) -> list[str]:
    """The migrations one checkout has and the other lacks (`app/name`, sorted). A
    checkout served by `--compare` shares this database, so its schema must be this
    one's: an earlier one's inserts miss the columns a later migration requires."""

    def of(checkout: Path) -> set[str]:
        return {
            f"{path.parent.parent.name}/{path.stem}"
            for path in checkout.glob("*/migrations/[0-9]*.py")
        }

    return sorted(of(here) ^ of(there))


def bench_source(name: str = BENCH_SOURCE_NAME) -> tuple[Source, str]:
    """The benchmark's source with a fresh API key and its rate limit lifted."""
    source, _ = source_get_or_create(name=name)
    source.rate_per_minute = LIFTED_RATE
    source.is_active = True
    source.save(update_fields=["rate_per_minute", "is_active"])
    return source, source_api_key_issue(source=source)


def bare_table_create() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {BARE_TABLE} (id bigserial PRIMARY KEY, "
            "key varchar(255) NOT NULL, payload jsonb NOT NULL, "
            "received_at timestamptz NOT NULL DEFAULT now())"
        )


def bench_ingest(
    *,
    rounds: int,
    requests: int,
    storms: int,
    storm_size: int,
    profile: Path | None,
    out: Callable[[str], None],
    compare: Path | None = None,
) -> dict[str, float]:
    """Runs the whole benchmark and prints it; returns the medians, ratio and duplicates.
    `compare`, a checkout of another commit, is served too ("earlier") and measured in
    the same interleaved rounds: on a machine whose speed drifts, the only fair before
    and after."""
    bare_table_create()
    bench_tables_empty(BARE_TABLE)
    source, api_key = bench_source()
    run_id = uuid.uuid4().hex[:8]
    log_dir = Path(tempfile.mkdtemp(prefix="bench_ingest_"))
    servers: list[Server] = []
    try:
        apps = [
            ("onefold", "config.wsgi", REPO),
            ("bare", "lab.bench.bare_wsgi", REPO),
            ("service", "lab.bench.bare_wsgi", REPO),
        ]
        if compare is not None:
            apps.append(("earlier", "config.wsgi", compare))
        for name, app, cwd in apps:
            servers.append(start_server(name, app, log_dir, cwd=cwd))
        targets = [_target(server, api_key) for server in servers]
        figures = _interleaved(targets, rounds=rounds, requests=requests, run_id=run_id, out=out)
        if profile is not None:
            _profile(
                servers[0], targets[0], requests=requests, run_id=run_id, into=profile, out=out
            )
        figures["duplicates"] = _storms(
            targets[0], source, count=storms, size=storm_size, run_id=run_id, out=out
        )
    finally:
        for server in servers:
            server.stop()
    shutil.rmtree(log_dir, ignore_errors=True)
    return figures


# The proofs' servers: no API key; each its path and its answer to a new submission.
_PROOF_TARGETS = {"bare": (BARE_PATH, 201), "service": (SERVICE_PATH, 202)}


def _target(server: Server, api_key: str) -> Target:
    pid = server.process.pid
    if server.name in _PROOF_TARGETS:
        path, expected = _PROOF_TARGETS[server.name]
        return Target(server.name, server.port, path, {}, expected, pid)
    headers = {"Authorization": f"Api-Key {api_key}"}
    return Target(server.name, server.port, INGEST_PATH, headers, 202, pid)


def _interleaved(
    targets: list[Target],
    *,
    rounds: int,
    requests: int,
    run_id: str,
    out: Callable[[str], None],
) -> dict[str, float]:
    """Rounds in turn on each target, the order reversed every other round. Onefold's
    figures (and the earlier checkout's) are given as ratios to the bare endpoint's."""
    for target in targets:  # warm-up: imports, connections, caches
        run_round(target, requests=min(200, requests), tag=f"{run_id}-warm-{target.name}")
    rounds_of: dict[str, list[RoundResult]] = {target.name: [] for target in targets}
    out(f"{requests} requests a round, {THREADS} client threads, {WORKERS} sync workers each")
    out("CPU a request: server + PostgreSQL + client")
    for n in range(rounds):
        for target in targets if n % 2 == 0 else targets[::-1]:
            rounds_of[target.name].append(
                run_round(target, requests=requests, tag=f"{run_id}-r{n}-{target.name}")
            )
        done = ", ".join(
            f"{name} {results[-1].rate:.0f} req/s ({results[-1].cpu})"
            for name, results in rounds_of.items()
        )
        out(f"round {n + 1}: {done}")
    medians = {
        name: statistics.median(r.rate for r in results) for name, results in rounds_of.items()
    }
    cpu = {name: _median_cpu(results) for name, results in rounds_of.items()}
    figures = {"bare": medians["bare"], "bare_cpu_ms": cpu["bare"].total}
    for name in (n for n in rounds_of if n != "bare"):
        ratio = medians[name] / medians["bare"]
        figures |= {name: medians[name], f"{name}_cpu_ms": cpu[name].total}
        figures["ratio" if name == "onefold" else f"{name}_ratio"] = ratio
        out(
            f"median of {rounds} rounds: {name} {medians[name]:.0f} req/s, bare "
            f"{medians['bare']:.0f} req/s, ratio {ratio:.2f}x; CPU a request: {name} "
            f"{cpu[name]}, bare {cpu['bare']} "
            f"({cpu['bare'].total / cpu[name].total:.2f}x of {name}'s)"
        )
    busy = ", ".join(f"{n} {medians[n] * cpu[n].total / 1000:.2f}" for n in rounds_of)
    out(f"cores busy (rate x CPU a request): {busy} of {os.cpu_count()}")
    verdict = "meets" if figures["ratio"] >= REQUIRED_RATIO else "MISSES"
    out(f"onefold: {figures['ratio']:.2f}x the bare endpoint's rate ({verdict} {REQUIRED_RATIO}x)")
    for ratio in (REQUIRED_RATIO, TARGET_RATIO):
        out(f"budget: {target_budget(cpu['bare'], cpu['onefold'], ratio)}")
    return figures


def _median_cpu(results: list[RoundResult]) -> CpuPerRequest:
    """Each part's median over the rounds."""
    return CpuPerRequest(
        *(
            statistics.median(getattr(r.cpu, part) for r in results)
            for part in ("server", "database", "client")
        )
    )


def _storm(target: Target, key: str, size: int) -> list[tuple[int, bytes]]:
    """`size` identical requests released together by a barrier."""
    answers: list[tuple[int, bytes]] = []
    lock = threading.Lock()
    start = threading.Barrier(size)

    def client() -> None:
        start.wait()
        answer = target.post(key)
        with lock:
            answers.append(answer)

    clients = [threading.Thread(target=client, daemon=True) for _ in range(size)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    return answers


def storm_duplicates(source: Source, key: str, answers: list[tuple[int, bytes]]) -> int:
    """Rows beyond one event, its pipeline's operations and one accepted delivery; a
    lost answer or a second event id is an error, not a figure."""
    statuses = Counter(status for status, _ in answers)
    ids = {json.loads(body).get("event_id") for status, body in answers if status in (200, 202)}
    if set(statuses) - {200, 202} or len(ids) != 1:
        raise BenchmarkError(f"storm {key}: answers {dict(statuses)}, event ids {ids}")
    events = Event.objects.filter(source=source, key=key)
    operations = Operation.objects.filter(event__in=events).count()
    outcomes = Counter(Delivery.objects.filter(event__in=events).values_list("outcome", flat=True))
    if sum(outcomes.values()) != len(answers):
        raise BenchmarkError(f"storm {key}: {len(answers)} requests, deliveries {outcomes}")
    expected_operations = len(pipeline_for(source, "contact"))
    return (
        max(0, events.count() - 1)
        + max(0, operations - expected_operations)
        + max(0, outcomes[Delivery.Outcome.ACCEPTED] - 1)
        + max(0, statuses[202] - 1)
    )


def _storms(
    target: Target,
    source: Source,
    *,
    count: int,
    size: int,
    run_id: str,
    out: Callable[[str], None],
) -> float:
    duplicates = 0
    for n in range(count):
        key = f"{run_id}-storm-{n}"
        duplicates += storm_duplicates(source, key, _storm(target, key, size))
    out(f"{count} storms of {size} identical requests: {duplicates} duplicates")
    return float(duplicates)


def _profile(
    server: Server,
    target: Target,
    *,
    requests: int,
    run_id: str,
    into: Path,
    out: Callable[[str], None],
) -> None:
    """py-spy on every worker of `server` during one unmeasured round, twice at once:
    `wall` with idle frames (a worker waiting for PostgreSQL is time the request
    takes) and `cpu` without them (what the process itself spends)."""
    py_spy = Path(sys.executable).parent / "py-spy"
    if not py_spy.exists():
        raise BenchmarkError("--profile needs py-spy (the dev extras: make install)")
    into.mkdir(parents=True, exist_ok=True)
    raws = {kind: into / f"{target.name}-{kind}.txt" for kind in ("wall", "cpu")}
    samplers = [
        subprocess.Popen(
            [str(py_spy), "record", "--pid", str(server.process.pid), "--subprocesses"]
            + (["--idle"] if kind == "wall" else ["--gil"])
            + ["--nonblocking", "--rate", "200", "--format", "raw", "--output", str(raw)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for kind, raw in raws.items()
    ]
    time.sleep(2)  # py-spy attaches to each worker
    run_round(target, requests=requests, tag=f"{run_id}-profile")
    for sampler in samplers:
        sampler.send_signal(signal.SIGINT)
        sampler.wait(timeout=60)
    for kind, raw in raws.items():
        out(f"profile ({kind}) of {target.name} written to {raw}; share of request samples:")
        for line in profile_summary(raw.read_text()):
            out(f"  {line}")


def profile_summary(raw: str, *, top: int = 20) -> list[str]:
    """From py-spy's raw (collapsed) stacks: each function's share of the samples taken
    while a worker handled a request, inclusive (itself and what it called) and self.
    Frames above 90% inclusive are the handler's plumbing (gunicorn, Django's
    middleware chain, DRF's dispatch) and are left out of the inclusive list."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = [_frame_name(frame) for frame in stack.split(";")]
        starts = [i for i, f in enumerate(frames) if f.startswith(REQUEST_FRAME)]
        if not count_text.isdigit() or not starts:
            continue
        frames = frames[starts[0] + 1 :]
        count = int(count_text)
        total += count
        own[frames[-1] if frames else REQUEST_FRAME] += count
        for name in set(frames):
            inclusive[name] += count
    if not total:
        return ["no request samples"]
    shown = [(name, n) for name, n in inclusive.most_common() if n <= 0.9 * total][:top]
    lines = [f"{total} samples in requests; inclusive:"]
    lines += [f"{100 * n / total:5.1f}%  {name}" for name, n in shown]
    lines.append("self:")
    lines += [f"{100 * n / total:5.1f}%  {name}" for name, n in own.most_common(top)]
    return lines


def _frame_name(frame: str) -> str:
    """`handle (/…/site-packages/django/core/handlers/wsgi.py:124)` ->
    `handle (django/core/handlers/wsgi.py)`: no line, no machine's path."""
    name, _, where = frame.partition(" (")
    if not where:
        return name
    path = where.rstrip(")").rsplit(":", 1)[0]
    for prefix in ("site-packages/", f"{REPO}/"):
        path = path.split(prefix, 1)[-1]
    return f"{name} ({path})"
