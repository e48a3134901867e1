"""`manage.py status`: the onefold_* figures of /metrics at a glance, one line each."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils import timezone

from idempotency_core.observability.figures import Figure, figures_read


class Command(BaseCommand):
    help = "Print Onefold's figures (the onefold_* metrics of /metrics), one line per figure."

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        try:
            figures = figures_read(now=now)
        except DatabaseError as exc:
            raise CommandError(f"the database did not answer ({type(exc).__name__})") from None
        rows = [row for figure in figures for row in figure_rows(figure)]
        width = max(len(name) for name, _ in rows)
        self.stdout.write(f"Onefold at {now:%Y-%m-%d %H:%M:%S} UTC")
        self.stdout.write(f"{'figure':<{width}}  value")
        for name, value in rows:
            self.stdout.write(f"{name:<{width}}  {value}")


def figure_rows(figure: Figure) -> list[tuple[str, str]]:
    """(name{labels}, value) per sample, as Prometheus writes them; a figure
    without samples (no reconciliation run yet, no submission in the window) gets
    one line saying so."""
    if not figure.samples:
        return [(figure.name, "none")]
    rows = []
    for label_values, value in figure.samples:
        labels = ",".join(
            f'{label}="{label_value}"'
            for label, label_value in zip(figure.labels, label_values, strict=True)
        )
        rows.append((f"{figure.name}{{{labels}}}" if labels else figure.name, _number(value)))
    return rows


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.1f}"
