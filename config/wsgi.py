"""WSGI entry point for Onefold (gunicorn config.wsgi).

gunicorn runs no system checks of its own; the serious ones (the development
SECRET_KEY on a public host, a misconfigured queue) are run here, so a web
server refuses to start as `manage.py check` would.
"""

import logging
import os

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# A web process queues tasks and runs no cluster, so the only INFO line django-q2
# writes here is the per-task "Enqueued" that QuietTaskLines drops. Below WARNING
# the line is not even built: no caller's frame found, no record made, no filter run,
# on every new submission.
if settings.LOGGING["loggers"]["django-q"]["filters"]:
    logging.getLogger("django-q").setLevel(logging.WARNING)

_serious = [message for message in checks.run_checks() if message.is_serious()]
if _serious:
    raise ImproperlyConfigured(
        "System check errors; fix them before serving:\n"
        + "\n".join(str(message) for message in _serious)
    )
