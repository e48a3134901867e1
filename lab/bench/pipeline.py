"""Benchmark of the whole pipeline under a burst (not a unit test).

N submissions are stored at once (one transaction, so their first tasks appear
together), then timed until Onefold has recorded every step as succeeded, which it
does only once the sandbox has answered for the effect; the sandbox must then hold
every record, task and email. The burst's end is watched in Onefold's database, not by
asking the sandbox: each question takes the sandbox store's one lock, which Onefold's
own calls then wait behind (the bare client's end needs no such watching).
Workers are real `qcluster` processes on this database, one cluster and then
two, calling the sandbox (its own process, started here) over loopback.

The limit beside it is measured in the same run: a bare client that drives the
same three effects (record, task, SMTP message) straight into the sandbox, with
as many processes as the clusters have workers, one pooled HTTP client and one
SMTP connection each: no database, no queue, no claim, no attempt record. The
ratio says what Onefold's guarantees cost over the sandbox's own speed. The engine
can also run without the queue (`engine_run`): the same chains in as many plain
processes, no django-q2, its ratio the ceiling the clusters' own stays under.

Duplicates are counted by the sandbox (`/_sandbox/stats`): records and tasks by
external reference, messages by recipient (every submission has its own).

The rate depends on whatever else this machine runs at the time; the CPU each
submission cost does not, or far less. So each run also reads, from /proc, the
CPU spent during the burst by the client (the clusters' processes, or the bare
client's), by PostgreSQL's backends for this database and by the sandbox, and
prints the capacity it implies: the submissions per second all the machine's
cores would carry at that cost.

It refuses to run on a database whose name does not contain "bench": it empties
the tables. `manage.py bench_pipeline` runs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import re
import resource
import signal
import smtplib
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as EventType
from typing import IO, Any

import httpx
from django.conf import settings
from django.db import connections, transaction
from django.test import override_settings

from idempotency_core.intake.ingest import event_ingest
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Destination, Operation, ReviewCase
from idempotency_core.platform.env import database_url_of
from idempotency_core.tasks import operation_run
from lab.bench.cpu import BackendsWatch, cpu_seconds, own_backend, tree_cpu
from lab.bench.tables import bench_tables_empty

Out = Callable[[str], None]
# What Onefold's rate is held to, as a multiple of the kept-alive bare client's.
TARGET_RATIO = 0.6
_PORTS = (
    re.compile(r"Sandbox CRM listening on http://[\d.]+:(\d+)"),
    re.compile(r"Sandbox SMTP listening on [\d.]+:(\d+)"),
)


class BenchmarkError(Exception):
    """The benchmark cannot run here, or a run did not end as it should."""


@dataclass(frozen=True)
class Sandbox:
    http_url: str
    smtp_port: int
    client: httpx.Client
    pid: int

    def stats(self, *, detail: bool) -> dict[str, Any]:
        response = self.client.get("/_sandbox/stats", params={"detail": int(detail)})
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def reset(self) -> None:
        self.client.post("/_sandbox/reset").raise_for_status()


@dataclass(frozen=True)
class Cpu:
    """CPU seconds spent during a run, by whom (read from /proc: Linux only)."""

    client: float  # Onefold's worker clusters, or the bare client's processes
    database: float  # PostgreSQL's backends for this database
    sandbox: float

    @property
    def total(self) -> float:
        return self.client + self.database + self.sandbox


@dataclass(frozen=True)
class Run:
    label: str
    submissions: int
    seconds: float
    duplicates: int
    cpu: Cpu

    @property
    def rate(self) -> float:
        return self.submissions / self.seconds

    def cpu_ms(self, seconds: float) -> float:
        return seconds * 1000 / self.submissions

    @property
    def capacity(self) -> float:
        """Submissions per second all this machine's cores would carry at this CPU cost:
        a figure that other load on the machine does not lower, unlike `rate`."""
        return (os.cpu_count() or 1) * self.submissions / self.cpu.total


def bench_pipeline_database_check() -> None:
    """Refuses a database not named for benchmarks."""
    name = settings.DATABASES["default"]["NAME"]
    if "bench" not in str(name):
        raise BenchmarkError(
            f"refusing to empty {name!r}: use a PostgreSQL database named like "
            "onefold_bench_pipeline (DATABASE_URL)"
        )


# -- processes --------------------------------------------------------------------


def child_spawn(
    args: list[str], log: IO[str], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`manage.py ARGS` in a child process on this database, its output into `log`."""
    return subprocess.Popen(
        [sys.executable, str(settings.BASE_DIR / "manage.py"), *args],
        env={
            **os.environ,
            "DATABASE_URL": database_url_of(settings.DATABASES["default"]),
            # A burst sends more confirmations from its one source than a day allows
            # (execution/confirmations.py): held ones would stop the measure short.
            "ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY": "1000000",
            **(env or {}),
        },
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: a cluster's workers stop with it
    )


def child_ready_wait(
    process: subprocess.Popen[bytes], log: IO[str], ready: Callable[[str], Any]
) -> Any:
    """What `ready` finds in the child's log once it finds something (within 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        log.seek(0)
        text = log.read()
        found = ready(text)
        if found:
            return found
        if process.poll() is not None or time.monotonic() > deadline:
            raise BenchmarkError(f"a child process did not start:\n{text}")
        time.sleep(0.1)


def child_stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child alone, which stops its own workers in order: sent across
    its process group, a qcluster loses its workers under it and hangs until killed
    (30 s a run). What is left of the group is killed after."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextmanager
def sandbox_running() -> Iterator[Sandbox]:
    """The sandbox in a process of its own, so its CPU is not the benchmark's."""
    with tempfile.TemporaryFile(mode="w+") as log:
        process = child_spawn(["sandbox", "--http-port", "0", "--smtp-port", "0"], log)
        try:

            def ports(text: str) -> tuple[int, int] | None:
                found = [pattern.search(text) for pattern in _PORTS]
                return (int(found[0][1]), int(found[1][1])) if found[0] and found[1] else None

            http_port, smtp_port = child_ready_wait(process, log, ports)
            url = f"http://127.0.0.1:{http_port}"
            with httpx.Client(base_url=url, timeout=60) as client:
                yield Sandbox(http_url=url, smtp_port=smtp_port, client=client, pid=process.pid)
        finally:
            child_stop(process)


@contextmanager
def clusters_running(count: int, *, env: dict[str, str] | None = None) -> Iterator[list[int]]:
    """`count` qcluster processes on this database; yields their pids."""
    with ExitStack() as stack:
        processes = []
        for _ in range(count):
            log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            process = child_spawn(["qcluster"], log, env)
            stack.callback(child_stop, process)
            child_ready_wait(process, log, lambda text: " running." in text)
            processes.append(process)
        yield [process.pid for process in processes]


# -- Onefold ----------------------------------------------------------------------


def bench_source(sandbox: Sandbox) -> Any:
    """A source whose CRM and mailer are this run's sandbox."""
    crm, _ = Destination.objects.update_or_create(
        name="bench-crm",
        defaults={"kind": Destination.Kind.CRM_HTTP, "base_url": sandbox.http_url},
    )
    mailer, _ = Destination.objects.update_or_create(
        name="bench-mail",
        defaults={"kind": Destination.Kind.SMTP, "base_url": f"127.0.0.1:{sandbox.smtp_port}"},
    )
    source, _ = source_get_or_create(name="bench-pipeline")
    source.crm, source.mailer = crm, mailer
    source.save(update_fields=["crm", "mailer"])
    return source


def payload_for(run: str, index: int) -> dict[str, Any]:
    """A distinct contact per submission, so messages count by recipient."""
    return {
        "form": "contact",
        "contact": {"name": f"Bench {index}", "email": f"bench-{run}-{index}@example.com"},
        "message": "Please quote for a kitchen refit.",
    }


def submissions_store(source: Any, *, run: str, count: int) -> float:
    """Stores `count` submissions in one transaction; returns the moment of its commit."""
    with transaction.atomic():
        for index in range(count):
            event_ingest(source=source, key=f"{run}-{index}", payload=payload_for(run, index))
    return time.monotonic()


def effects_wait(sandbox: Sandbox, *, count: int, timeout: float, every: float = 0.05) -> float:
    """Waits until the sandbox holds `count` records, tasks and messages, asking it every
    `every` seconds (the figure's resolution; each question costs the sandbox CPU)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = sandbox.stats(detail=False)
        if min(stats["records"], stats["tasks"], stats["messages"]) >= count:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise BenchmarkError(f"timed out after {timeout:.0f} s: the sandbox holds {stats}")
        time.sleep(every)


def outcomes_wait(*, timeout: float, every: float = 0.05) -> float:
    """Waits until every operation has succeeded, asking Onefold's database every `every`
    seconds (the figure's resolution); fails at once if a review case opens."""
    deadline = time.monotonic() + timeout
    unfinished = Operation.objects.exclude(status=Operation.Status.SUCCEEDED)
    while True:
        cases = ReviewCase.objects.exists()
        if not cases and not unfinished.exists():
            return time.monotonic()
        if cases or time.monotonic() > deadline:
            raise BenchmarkError(
                f"{unfinished.count()} operations unfinished and "
                f"{ReviewCase.objects.count()} review cases"
            )
        time.sleep(every)


def duplicates_count(sandbox: Sandbox) -> int:
    """Effects beyond one per external reference (records, tasks) or recipient (messages)."""
    stats = sandbox.stats(detail=True)
    maps = ("records_by_external_ref", "tasks_by_external_ref", "messages_by_recipient")
    return sum(count - 1 for name in maps for count in stats[name].values() if count > 1)


def onefold_run(
    sandbox: Sandbox, *, clusters: int, count: int, env: dict[str, str] | None = None
) -> Run:
    """One burst through `clusters` real worker clusters."""
    bench_tables_empty()
    sandbox.reset()
    source = bench_source(sandbox)
    run = uuid.uuid4().hex[:8]
    with clusters_running(clusters, env=env) as roots:
        workers, sandbox_cpu = tree_cpu(roots), cpu_seconds([sandbox.pid])
        with BackendsWatch(exclude=[own_backend()]) as database:
            started = submissions_store(source, run=run, count=count)
            finished = outcomes_wait(timeout=max(120.0, count))
        cpu = Cpu(
            client=tree_cpu(roots) - workers,
            database=database.spent,
            sandbox=cpu_seconds([sandbox.pid]) - sandbox_cpu,
        )
        effects_wait(sandbox, count=count, timeout=10)  # the sandbox holds them all
    return Run(
        label=f"Onefold, {clusters} cluster{'s' if clusters > 1 else ''}",
        submissions=count,
        seconds=finished - started,
        duplicates=duplicates_count(sandbox),
        cpu=cpu,
    )


def bench_pipeline_in_process(
    *, count: int, rounds: int, out: Callable[[str], None], profile: str | None = None
) -> float:
    """`count` pipelines run one after the other in this process, each as a worker's task
    runs it (`tasks.operation_run` on the first step, which chains the rest), against the
    sandbox: the CPU of this process a submission, best of `rounds`. No django-q2, no
    second worker, no PostgreSQL or sandbox CPU: the engine's Python alone, the figure
    that moves least with the machine's load. `profile`: cProfile's statistics of the
    last round (timer: process CPU) written to that file, for `python -m pstats`."""
    import cProfile

    best = float("inf")
    with (
        sandbox_running() as sandbox,
        override_settings(ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY=1_000_000),
    ):
        for number in range(1, rounds + 1):
            bench_tables_empty()
            sandbox.reset()
            submissions_store(bench_source(sandbox), run=uuid.uuid4().hex[:8], count=count)
            firsts = list(
                Operation.objects.filter(step="create_enquiry").values_list("pk", flat=True)
            )
            started = time.process_time()
            if profile is not None and number == rounds:
                profiler = cProfile.Profile(time.process_time)
                profiler.runcall(_chains_run, firsts)
                profiler.dump_stats(profile)
            else:
                _chains_run(firsts)
            spent = (time.process_time() - started) / count * 1000
            done = Operation.objects.filter(status=Operation.Status.SUCCEEDED).count()
            if done != 3 * count:
                raise BenchmarkError(f"round {number}: {done} of {3 * count} steps succeeded")
            best = min(best, spent)
            out(f"round {number}: {spent:.2f} ms of this process's CPU a submission")
    out(f"in process, {count} pipelines one after the other: best {best:.2f} ms a submission")
    return best


def _chains_run(first_steps: list[int]) -> None:
    for operation_id in first_steps:
        operation_run(operation_id)


# -- the bare client --------------------------------------------------------------


def _bare_message(run: str, index: int) -> bytes:
    message = EmailMessage()
    message["From"] = settings.DEFAULT_FROM_EMAIL
    message["To"] = payload_for(run, index)["contact"]["email"]
    message["Subject"] = "We received your enquiry"
    message["Message-ID"] = f"<bare-{run}-{index}@bench>"
    message.set_content(f"Hello Bench {index},\n\nThank you for your enquiry.\n")
    return message.as_bytes()


def _bare_worker(
    sandbox_url: str,
    smtp_port: int,
    run: str,
    indices: list[int],
    go: EventType,
    database: Synchronized[float],  # left at zero: the bare client has no database
) -> None:
    """One process of the bare client: record, task, message for each index."""
    with httpx.Client(base_url=sandbox_url, timeout=60) as client:
        mail = smtplib.SMTP("127.0.0.1", smtp_port, timeout=60)
        go.wait()
        for index in indices:
            bare_effects(client, mail, run=run, index=index)
        mail.quit()


def bare_effects(client: httpx.Client, mail: smtplib.SMTP, *, run: str, index: int) -> None:
    """A submission's three effects straight into the sandbox: record, task, message."""
    ref = f"bare-{run}-{index}"
    payload = payload_for(run, index)
    record = client.post(
        "/crm/records",
        json={**payload["contact"], "message": payload["message"], "external_ref": ref},
        headers={"Idempotency-Key": ref},
    )
    record.raise_for_status()
    client.post(
        f"/crm/records/{record.json()['id']}/tasks",
        json={"external_ref": f"{ref}-task", "title": "Follow up", "assignee": ""},
        headers={"Idempotency-Key": f"{ref}-task"},
    ).raise_for_status()
    mail.sendmail(
        settings.DEFAULT_FROM_EMAIL, [payload["contact"]["email"]], _bare_message(run, index)
    )


def bare_run(sandbox: Sandbox, *, processes: int, count: int) -> Run:
    """The same effects, `processes` at a time, straight into the sandbox."""
    sandbox.reset()
    run = uuid.uuid4().hex[:8]
    slices = [list(range(n, count, processes)) for n in range(processes)]
    seconds, cpu = _forked_burst(
        sandbox,
        _bare_worker,
        [(sandbox.http_url, sandbox.smtp_port, run, indices) for indices in slices],
    )
    return _burst_counted(
        sandbox, label=f"bare client, {processes} processes", count=count, seconds=seconds, cpu=cpu
    )


def _forked_burst(
    sandbox: Sandbox, target: Callable[..., None], args: list[tuple[Any, ...]]
) -> tuple[float, Cpu]:
    """One forked process per `args`, each calling `target(*its_args, go, database)`:
    connected, they wait for `go`, which starts the clock; it stops when the last one
    ends. Each adds its PostgreSQL backend's CPU to the shared `database` itself (a
    backend that ends with its process is gone before a watch could read it last).
    Returns the seconds and the CPU: the processes', their backends' and the sandbox's."""
    context = multiprocessing.get_context("fork")
    go, database = context.Event(), context.Value("d", 0.0)
    connections.close_all()  # a forked child must not share the parent's socket
    children = [context.Process(target=target, args=(*own, go, database)) for own in args]
    children_cpu = _children_cpu()
    for child in children:
        child.start()
    time.sleep(0.5)  # connected and waiting
    sandbox_cpu = cpu_seconds([sandbox.pid])
    started = time.monotonic()
    go.set()
    for child in children:
        child.join()
    finished = time.monotonic()
    sandbox_cpu = cpu_seconds([sandbox.pid]) - sandbox_cpu
    children_cpu = _children_cpu() - children_cpu
    if any(child.exitcode for child in children):
        raise BenchmarkError(f"a process of the burst failed ({target.__name__})")
    cpu = Cpu(client=children_cpu, database=database.value, sandbox=sandbox_cpu)
    return finished - started, cpu


def _burst_counted(sandbox: Sandbox, *, label: str, count: int, seconds: float, cpu: Cpu) -> Run:
    """A forked burst's run, once the sandbox holds its every effect: duplicates counted."""
    effects_wait(sandbox, count=count, timeout=10)
    return Run(
        label=label,
        submissions=count,
        seconds=seconds,
        duplicates=duplicates_count(sandbox),
        cpu=cpu,
    )


# -- the engine without the queue -------------------------------------------------


def _engine_worker(first_steps: list[int], go: EventType, database: Synchronized[float]) -> None:
    """One plain process running chains as a worker's task does, with no cluster round it."""
    backend = own_backend()  # connected before the clock starts, as a worker is
    go.wait()
    before = cpu_seconds([backend])
    _chains_run(first_steps)
    with database.get_lock():
        database.value += cpu_seconds([backend]) - before
    connections.close_all()


def engine_run(sandbox: Sandbox, *, processes: int, count: int) -> Run:
    """The chains a cluster's workers run (`tasks.operation_run` on each first step), in
    `processes` plain processes: no django-q2, so no dequeue, no acknowledgement, no
    pusher or monitor. Its rate against the bare client's is the ceiling the engine's
    own statements and calls set; a cluster's rate below it is what the queue costs."""
    bench_tables_empty()
    sandbox.reset()
    with override_settings(ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY=1_000_000):
        submissions_store(bench_source(sandbox), run=uuid.uuid4().hex[:8], count=count)
        firsts = list(
            Operation.objects.filter(step="create_enquiry")
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        seconds, cpu = _forked_burst(
            sandbox, _engine_worker, [(firsts[n::processes],) for n in range(processes)]
        )
    done = Operation.objects.filter(status=Operation.Status.SUCCEEDED).count()
    if done != 3 * count or ReviewCase.objects.exists():
        raise BenchmarkError(f"the engine alone: {done} of {3 * count} steps succeeded")
    return _burst_counted(
        sandbox, label=f"engine alone, {processes} processes", count=count, seconds=seconds, cpu=cpu
    )


def _children_cpu() -> float:
    """CPU of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- the report -------------------------------------------------------------------


HEADER = (
    "| run | submissions | seconds | submissions/s | vs bare | duplicates "
    "| CPU ms per submission: client + PostgreSQL + sandbox | capacity (submissions/s "
    "on all cores) | vs bare |"
)


def _row(run: Run, baseline: Run | None = None) -> str:
    rate_ratio = f"{run.rate / baseline.rate:.2f}x" if baseline else ""
    capacity_ratio = f"{run.capacity / baseline.capacity:.2f}x" if baseline else ""
    cpu = run.cpu
    return (
        f"| {run.label} | {run.submissions} | {run.seconds:.2f} | {run.rate:.1f} "
        f"| {rate_ratio} | {run.duplicates} | {run.cpu_ms(cpu.client):.1f} + "
        f"{run.cpu_ms(cpu.database):.1f} + {run.cpu_ms(cpu.sandbox):.1f} = "
        f"{run.cpu_ms(cpu.total):.1f} | {run.capacity:.0f} | {capacity_ratio} |"
    )


def bench_pipeline_measure(
    *, count: int, clusters: list[int], rounds: int, out: Out, without_queue: bool = False
) -> list[tuple[Run, Run]]:
    """Interleaved rounds (bare, Onefold) per cluster count; prints the median of each.
    `without_queue`: the engine in as many plain processes as the clusters would have
    workers (`engine_run`) in place of the clusters."""
    workers = int(settings.Q_CLUSTER["workers"])
    out(
        f"{count} submissions at once, {workers} workers per cluster, poll "
        f"{settings.Q_CLUSTER['poll']} s, median of {rounds} round(s)"
    )
    out(HEADER)
    out("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")

    def onefold(sandbox: Sandbox, count_of_clusters: int) -> Run:
        if without_queue:
            return engine_run(sandbox, processes=workers * count_of_clusters, count=count)
        return onefold_run(sandbox, clusters=count_of_clusters, count=count)

    results = []
    with sandbox_running() as sandbox:
        for count_of_clusters in clusters:
            pairs = [
                (
                    bare_run(sandbox, processes=workers * count_of_clusters, count=count),
                    onefold(sandbox, count_of_clusters),
                )
                for _ in range(rounds)
            ]
            bare, ours = (_median([pair[side] for pair in pairs]) for side in (0, 1))
            out(_row(bare))
            out(_row(ours, bare))
            results.append((bare, ours))
    for bare, ours in results:
        if without_queue:
            verdict = f"the ceiling for the clusters' {TARGET_RATIO}x target"
        else:
            verdict = "meets" if ours.rate >= TARGET_RATIO * bare.rate else "MISSES"
            verdict += f" the {TARGET_RATIO}x target"
        out(
            f"{ours.label}: {ours.rate / bare.rate:.2f}x the bare client's rate "
            f"({verdict}), {ours.capacity / bare.capacity:.2f}x "
            f"its capacity, {ours.duplicates} duplicates"
        )
    return results


def _median(runs: list[Run]) -> Run:
    median = statistics.median_low(run.seconds for run in runs)
    chosen = next(run for run in runs if run.seconds == median)
    return dataclasses.replace(chosen, duplicates=max(run.duplicates for run in runs))


# -- the poll interval ------------------------------------------------------------


def latency_run(sandbox: Sandbox, *, env: dict[str, str], count: int) -> list[float]:
    """Seconds from commit to the third effect, one submission at a time (an idle queue)."""
    bench_tables_empty()
    sandbox.reset()
    source = bench_source(sandbox)
    run = uuid.uuid4().hex[:8]
    latencies = []
    with clusters_running(1, env=env):
        for index in range(count):
            time.sleep(0.3)  # the workers idle: the first step waits for a poll
            started = submissions_store_one(source, run=run, index=index)
            # Asked every 2 ms: one submission takes tens of milliseconds.
            finished = effects_wait(sandbox, count=index + 1, timeout=60, every=0.002)
            latencies.append(finished - started)
    return latencies


def submissions_store_one(source: Any, *, run: str, index: int) -> float:
    event_ingest(source=source, key=f"{run}-{index}", payload=payload_for(run, index))
    return time.monotonic()


def bench_pipeline_poll(*, polls: list[float], count: int, out: Out) -> None:
    """A burst and an idle queue's latency for each poll interval, one cluster."""
    out(f"Poll interval: one cluster, a burst of {count} and 10 single submissions")
    out("| poll (s) | burst submissions/s | idle latency p50 (ms) | max (ms) | idle polls/s |")
    out("| ---: | ---: | ---: | ---: | ---: |")
    with sandbox_running() as sandbox:
        for poll in polls:
            env = {"ONEFOLD_Q_POLL": str(poll)}
            burst = onefold_run(sandbox, clusters=1, count=count, env=env)
            latencies = latency_run(sandbox, env=env, count=10)
            out(
                f"| {poll} | {burst.rate:.1f} | {statistics.median(latencies) * 1000:.0f} "
                f"| {max(latencies) * 1000:.0f} | {1 / poll:.0f} |"
            )
