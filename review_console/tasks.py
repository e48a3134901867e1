"""django-q2 entry points of the console. Thin: take an id, call the service."""

from __future__ import annotations

from review_console.cases.bulk import bulk_replay_run as _bulk_replay_run


def bulk_replay_run(job_id: int) -> str:
    return _bulk_replay_run(job_id=job_id)
