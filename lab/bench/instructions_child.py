"""The process `lab/bench/instructions.py` counts under callgrind: `python
instructions_child.py ingest|bare|service|pipeline COUNT`, with the checkout to measure
on PYTHONPATH and DATABASE_URL naming a bench database. Run by path, not imported, so
that the checkout measured may be an earlier one (it needs that checkout's
`lab.bench.ingest`, `lab.bench.bare_endpoint` or `lab.bench.pipeline` helpers:
bench_source, submission_body, bare_table_create, INGEST_PATH, BARE_PATH, SERVICE_PATH,
sandbox_running, submissions_store; lab.bench.tables)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid


def counting(on: bool) -> None:
    """Switches callgrind's counting for this process (`--instr-atstart=no` starts off)."""
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
        check=True,
        capture_output=True,
    )


def ingest(count: int) -> None:
    from lab.bench.ingest import INGEST_PATH

    _requests_counted(count, INGEST_PATH, urlconf=None, status=202)


def bare(count: int) -> None:
    """`bench_ingest`'s baseline: the bare DRF endpoint, one INSERT."""
    from lab.bench.bare_endpoint import BARE_PATH
    from lab.bench.ingest import bare_table_create

    bare_table_create()
    _requests_counted(count, BARE_PATH, urlconf="lab.bench.bare_endpoint", status=201)


def service(count: int) -> None:
    """Onefold's ingest service behind the bare view: the API's own work left out."""
    from lab.bench.bare_endpoint import SERVICE_PATH

    _requests_counted(count, SERVICE_PATH, urlconf="lab.bench.bare_endpoint", status=202)


def _requests_counted(count: int, path: str, *, urlconf: str | None, status: int) -> None:
    """`count` submissions posted to `path` through the site's WSGI handler (Django's
    test client) to warm it, then `count` more counted; `urlconf`: the bench's own."""
    from django.test import Client
    from django.test.utils import override_settings

    from lab.bench.ingest import bench_source, submission_body

    _, api_key = bench_source()
    client = Client()

    def post(n: int) -> None:
        for _ in range(n):
            key = uuid.uuid4().hex
            answer = client.post(
                path,
                data=submission_body(key),
                content_type="application/json",
                headers={"Authorization": f"Api-Key {api_key}", "Idempotency-Key": key},
            )
            if answer.status_code != status:
                raise SystemExit(f"answered {answer.status_code}: {answer.content[:300]!r}")

    urlconfs = {"ROOT_URLCONF": urlconf} if urlconf is not None else {}
    with override_settings(ALLOWED_HOSTS=["testserver"], **urlconfs):
        post(count)
        counting(True)
        post(count)
        counting(False)


def pipeline(count: int) -> None:
    from django.test.utils import override_settings

    from idempotency_core.models import Operation
    from idempotency_core.tasks import operation_run
    from lab.bench import pipeline as bench
    from lab.bench.tables import bench_tables_empty

    limits = override_settings(ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY=1_000_000)
    with bench.sandbox_running() as sandbox, limits:
        bench_tables_empty()
        sandbox.reset()
        source = bench.bench_source(sandbox)
        bench.submissions_store(source, run=uuid.uuid4().hex[:8], count=2 * count)
        first_steps = Operation.objects.filter(step="create_enquiry").order_by("pk")
        firsts = list(first_steps.values_list("pk", flat=True))
        for operation_id in firsts[:count]:
            operation_run(operation_id)
        counting(True)
        for operation_id in firsts[count:]:
            operation_run(operation_id)
        counting(False)
        done = Operation.objects.filter(status=Operation.Status.SUCCEEDED).count()
        if done != 6 * count:
            raise SystemExit(f"{done} of {6 * count} steps succeeded")


def main() -> None:
    kind, count = sys.argv[1], int(sys.argv[2])
    # Run by path, Python put this folder first on the path: the checkout's modules
    # (PYTHONPATH) are the ones to import, never a sibling of this file by its name.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    import django

    django.setup()
    {"ingest": ingest, "bare": bare, "service": service, "pipeline": pipeline}[kind](count)
    print(f"counted {count}")


if __name__ == "__main__":
    main()
