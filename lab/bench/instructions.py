"""Instructions a request and a chain: what Onefold's Python costs, counted, not timed.

The other benchmarks time real servers and workers on a machine whose speed drifts:
here the same code ran at 1.4 ms and at 3.7 ms of CPU a bare request on different
days, and one run's ratio moves by about ±0.04 within an hour. A saving of a few
percent is lost in that. Valgrind's callgrind counts the instructions a process
executes instead, which do not depend on the machine's load: the same code and
inputs give the same count within a fraction of a percent (the dictionaries' hash
seed, random keys and ids).

Each measurement is one child process, run under
`valgrind --tool=callgrind --instr-atstart=no` with a checkout on its path (this one,
or `--compare DIR`'s), whose body is `instructions_child.py`:

* ingest: `count` submissions posted through the site's WSGI handler (Django's test
  client, in process), then `count` more with callgrind's counting switched on
  (`callgrind_control -i on`), so that imports, caches and the first statements'
  preparation are not counted;
* bare and service: the same, posted to `bench_ingest`'s two baselines
  (lab/bench/bare_endpoint.py): the bare DRF endpoint (one INSERT), and Onefold's
  ingest service behind that same view. With ingest they split a request's
  instructions into the bare server's, the service's and the API's own;
* pipeline: `2 * count` submissions stored, the first `count` pipelines run as a
  worker's task runs them (`tasks.operation_run`, which chains the three steps)
  against the sandbox, then `count` more counted. The sandbox runs in a process of
  its own, not counted.

PostgreSQL's work is not counted (another process), only what the Onefold process
asks of it. `manage.py bench_instructions` runs it; it refuses a database whose name
lacks "bench".
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

CHILD = Path(__file__).with_name("instructions_child.py")
KINDS = ("ingest", "bare", "service", "pipeline")
# Kinds whose item is one request (the others': one chain).
REQUEST_KINDS = ("ingest", "bare", "service")
_COLLECTED = re.compile(r"Collected : ([\d,]+)")


class InstructionsError(Exception):
    """Valgrind is missing, or a child did not finish as it should."""


@dataclass(frozen=True)
class Count:
    checkout: Path
    kind: str
    count: int
    instructions: int

    @property
    def per_item(self) -> float:
        return self.instructions / self.count

    def __str__(self) -> str:
        item = "request" if self.kind in REQUEST_KINDS else "chain"
        return f"{self.per_item / 1e6:.3f} M instructions a {item}"


def instructions_counted(checkout: Path, kind: str, count: int) -> Count:
    """The instructions of `count` ingest requests or pipelines, run by `checkout`."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise InstructionsError("valgrind is not installed (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="onefold-callgrind-") as scratch:
        command = [
            valgrind,
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={scratch}/callgrind.out",
            sys.executable,
            str(CHILD),
            kind,
            str(count),
        ]
        env = {
            **os.environ,
            "PYTHONPATH": str(checkout),
            "DATABASE_URL": _database_url(),
            "DJANGO_SETTINGS_MODULE": "config.settings",
            # Valgrind runs the child at a fiftieth of its speed: a chain must not stop
            # for the task's time (engine._chain_allowance) before its last step.
            "ONEFOLD_Q_TIMEOUT": "3600",
        }
        done = subprocess.run(
            command, cwd=checkout, env=env, capture_output=True, text=True, timeout=3600
        )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None or "counted " not in done.stdout:
        tail = (done.stdout + done.stderr)[-3000:]
        raise InstructionsError(f"the {kind} child of {checkout} failed:\n{tail}")
    return Count(checkout, kind, count, int(found.group(1).replace(",", "")))


def _database_url() -> str:
    """This process's database (the test database, under the tests) for the child,
    whose settings read DATABASE_URL."""
    db = connection.settings_dict
    password = f":{quote(str(db['PASSWORD']), safe='')}" if db.get("PASSWORD") else ""
    user = quote(str(db.get("USER") or "postgres"), safe="")
    host = db.get("HOST") or "127.0.0.1"
    return f"postgres://{user}{password}@{host}:{db.get('PORT') or 5432}/{db['NAME']}"


def bench_instructions(
    *,
    kinds: tuple[str, ...],
    count: int,
    compare: Path | None,
    out: Callable[[str], None],
) -> list[Count]:
    """Each kind's count for this checkout and, with `compare`, for that one too."""
    name = str(connection.settings_dict["NAME"])
    if "bench" not in name:
        raise InstructionsError(f"refusing to fill database {name!r}: its name lacks 'bench'")
    here = Path(settings.BASE_DIR)
    counts: list[Count] = []
    for kind in kinds:
        for checkout in (here, compare) if compare is not None else (here,):
            out(f"{kind}: counting {count} after {count} warm-ups, {checkout} ...")
            counts.append(instructions_counted(checkout, kind, count))
            out(f"{kind}, {checkout}: {counts[-1]}")
        if compare is not None:
            present, earlier = counts[-2], counts[-1]
            change = present.per_item / earlier.per_item - 1
            out(f"{kind}: {present} here, {earlier} in {compare} ({change:+.1%})")
    split = ingest_split([c for c in counts if c.checkout == here])
    if split is not None:
        out(split)
    return counts


def ingest_split(counts: list[Count]) -> str | None:
    """Where an ingest request's instructions go, from one checkout's ingest, bare and
    service counts (None without all three): the bare endpoint's, what the ingest
    service adds to it, and what the API's own work (the API key, the rate, strict JSON,
    validation, the answer) adds to that; and the bare endpoint's share of the whole,
    which bounds the ingest ratio from the server's side as `bench_ingest` measures
    it."""
    per = {c.kind: c.per_item / 1e6 for c in counts if c.kind in REQUEST_KINDS}
    if len(per) < len(REQUEST_KINDS):
        return None
    api, bare, service = per["ingest"], per["bare"], per["service"]
    return (
        f"ingest, split: the bare endpoint {bare:.3f} M, the ingest service "
        f"{service - bare:+.3f} M, the API's own work {api - service:+.3f} M "
        f"(a request {api:.3f} M); the bare endpoint's instructions are "
        f"{bare / api:.2f}x Onefold's, {bare / service:.2f}x the service's"
    )
