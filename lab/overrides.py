"""Settings a proof changes for the length of its run, and puts back afterwards.

The drill shortens the engine's timings (retry delays, attempts, the HTTP
timeout) so that its matrix finishes in about a minute. The engine reads those
settings when it needs them (`RetryPolicy.from_settings()`, the adapters'
`settings.ONEFOLD_HTTP_TIMEOUT_SECONDS`), never at import, so changing the
attribute on `django.conf.settings` is all it takes: no cache to clear, no one to
notify. This is the product's own small tool for that, so that the proofs do
not import Django's test utilities (whose `override_settings` is made for test
suites).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings

_ABSENT = object()


@contextmanager
def settings_overridden(**values: Any) -> Iterator[None]:
    """Sets each named setting on `django.conf.settings` for the block, then restores the
    previous value (or removes a setting that was not there), even when the block raises.

    Settings are process-wide: every thread of the process sees the new values while
    the block runs (the drill's concurrent attempts rely on that). Blocks that nest
    restore in reverse order, as `with` does; two threads overriding at once would not.
    """
    previous: dict[str, Any] = {}  # only the settings actually changed, in order
    try:
        for name, value in values.items():
            previous[name] = getattr(settings, name, _ABSENT)
            setattr(settings, name, value)
        yield
    finally:
        for name, value in reversed(previous.items()):
            if value is _ABSENT:
                delattr(settings, name)
            else:
                setattr(settings, name, value)
