"""WSGI entry point for Onefold (gunicorn config.wsgi).

gunicorn runs no system checks of its own; the serious ones (the development
SECRET_KEY on a public host, a misconfigured queue) are run here, so a web
server refuses to start as `manage.py check` would.
"""

import logging
import os

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

from idempotency_core.platform.logfilters import QuietTaskLines

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# A web process queues tasks and runs no cluster, so the only INFO line django-q2
# writes here is the per-task "Enqueued" that QuietTaskLines drops. Below WARNING
# the line is not even built: no caller's frame found, no record made, no filter run,
# on every new submission.
_django_q = logging.getLogger("django-q")
if any(isinstance(f, QuietTaskLines) for f in _django_q.filters):
    _django_q.setLevel(logging.WARNING)

_serious = [message for message in checks.run_checks() if message.is_serious()]
if _serious:
    raise ImproperlyConfigured(
        "System check errors; fix them before serving:\n"
        + "\n".join(str(message) for message in _serious)
    )
