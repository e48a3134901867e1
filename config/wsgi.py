"""WSGI entry point for Onefold (gunicorn config.wsgi).

gunicorn runs no system checks of its own; the serious ones (the development
SECRET_KEY on a public host, a misconfigured queue) are run here, so a web
server refuses to start as `manage.py check` would.
"""

import os

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

_serious = [message for message in checks.run_checks() if message.is_serious()]
if _serious:
    raise ImproperlyConfigured(
        "System check errors; fix them before serving:\n"
        + "\n".join(str(message) for message in _serious)
    )
