"""Generated requests against the published schema on a running server (schemathesis).

The ingest API's schema (/api/schema/) is fed to schemathesis's CLI, which runs
against the app under gunicorn (`web_server`) with a real API key and checks every
answer: no server error, status codes, content types, headers and bodies as the
schema says, schema-invalid requests refused, schema-valid ones accepted.

A schema cannot say everything the contract does. Four refusals of well-formed
bodies are rules, not bugs, and `accepted_unless_a_contract_rule` (this module is
also the run's hooks module, loaded by `st` through SCHEMATHESIS_HOOKS) lets exactly
those through in place of schemathesis's own `positive_data_acceptance`:

- no key in the header or the body: 400 `idempotency_key_missing` (the key may come
  from either place, which OpenAPI cannot express);
- a key reused with another payload: 422 `idempotency_key_reused` (schemathesis draws
  the same short keys again and again);
- `revises` naming no earlier submission of the same contact: 400 with that field's
  error alone;
- NUL in an object's key (`fields`): 400 `invalid_json`. PostgreSQL cannot store it,
  and OpenAPI 3.0 has no `propertyNames` to say so (strings' patterns do say it).

The suite runs `EXAMPLES` generated cases per operation (about 800 requests in
half a minute); CONTRIBUTING.md gives the 10,000-request run
(ONEFOLD_SCHEMATHESIS_EXAMPLES) and its figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

EXAMPLES = int(os.environ.get("ONEFOLD_SCHEMATHESIS_EXAMPLES", "250"))
MIN_REQUESTS = int(os.environ.get("ONEFOLD_SCHEMATHESIS_MIN_REQUESTS", "500"))
SEED = os.environ.get("ONEFOLD_SCHEMATHESIS_SEED", "20261129")


@schemathesis.check
def accepted_unless_a_contract_rule(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis's positive_data_acceptance, except the refusals the module names."""
    if response.status_code in (400, 422) and _refused_by_a_rule(response, case):
        return None
    return positive_data_acceptance(ctx, response, case)


def _refused_by_a_rule(response: Any, case: Any) -> bool:
    try:
        answer = response.json()
    except ValueError:
        return False
    if not isinstance(answer, dict):
        return False
    body = case.body if isinstance(case.body, dict) else {}
    headers = {name.lower() for name in (case.headers or {})}
    code = answer.get("code")
    if code == "idempotency_key_missing":
        return "idempotency-key" not in headers and "submission_id" not in body
    if code == "idempotency_key_reused":
        return response.status_code == 422
    if code == "invalid_json":
        return "NUL" in str(answer.get("detail")) and _has_nul_in_a_key(body)
    errors = answer.get("errors")
    return (
        code == "invalid"
        and "revises" in body
        and isinstance(errors, dict)
        and (set(errors) == {"revises"})
    )


def _has_nul_in_a_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any("\x00" in key or _has_nul_in_a_key(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_has_nul_in_a_key(item) for item in value)
    return False


@dataclass(frozen=True)
class Figures:
    requests: int
    server_errors: int
    failures: list[dict[str, Any]]
    errors: list[Any]
    seconds: float

    def summary(self) -> str:
        return (
            f"{self.requests} requests, {self.server_errors} server errors, "
            f"{sum(f['count'] for f in self.failures)} check failures, "
            f"{len(self.errors)} errors, {self.seconds:.0f} s"
        )


def st_command(url: str, key: str, report_dir: Path, examples: int) -> list[str]:
    """The run, as the README gives it."""
    return [
        str(Path(sys.executable).with_name("st")),
        "run",
        f"{url}/api/schema/",
        "--include-path-regex",
        "^/api/v1/",
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance",
        "-H",
        f"Authorization: Api-Key {key}",
        "--max-examples",
        str(examples),
        "--seed",
        SEED,
        "--workers",
        "2",
        "--generation-database",
        "none",
        "--report",
        "json,har",
        "--report-json-path",
        str(report_dir / "report.json"),
        "--report-har-path",
        str(report_dir / "requests.har"),
    ]


def read_figures(report_dir: Path) -> Figures:
    """Requests and their answers from the HAR (one entry per request sent), checks
    from the JSON report."""
    entries = json.loads((report_dir / "requests.har").read_text())["log"]["entries"]
    report = json.loads((report_dir / "report.json").read_text())
    return Figures(
        requests=len(entries),
        server_errors=sum(1 for e in entries if e["response"]["status"] >= 500),
        failures=report["failures"],
        errors=report["errors"],
        seconds=report["running_time"],
    )


@pytest.mark.slow
@pytest.mark.serial  # thousands of requests a minute
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_generated_requests_find_no_server_error_and_no_schema_violation(web_server, tmp_path):
    # Imported here: `st` loads this module as its hooks, where Django is not set up.
    from idempotency_core.intake.sources import source_create_with_key
    from idempotency_core.models import Source
    from tests.support.processes import REPO

    source, _, key = source_create_with_key(name="schemathesis")
    # The run sends thousands of requests a minute; the rate limit is not under test.
    Source.objects.filter(pk=source.pk).update(rate_per_minute=100_000_000)
    report_dir = tmp_path / "report"
    command = st_command(web_server.url, key, report_dir, EXAMPLES)
    print("\n" + " ".join(command).replace(key, "<key>"))
    run = subprocess.run(
        command,
        env={
            **os.environ,
            "SCHEMATHESIS_HOOKS": __name__,
            "NO_COLOR": "1",
            "PYTHONPATH": str(REPO),
        },
        cwd=tmp_path,  # schemathesis keeps a cache in its working directory
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if not (report_dir / "requests.har").exists():
        pytest.fail(f"schemathesis wrote no report:\n{run.stdout[-20000:]}{run.stderr[-5000:]}")
    figures = read_figures(report_dir)
    print(f"\nschemathesis: {figures.summary()}")
    assert figures.server_errors == 0, run.stdout[-20000:]
    assert figures.failures == [] and figures.errors == [], run.stdout[-20000:]
    assert run.returncode == 0, run.stdout[-20000:]
    assert figures.requests >= MIN_REQUESTS, figures.summary()
