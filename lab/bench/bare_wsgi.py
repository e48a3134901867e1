"""WSGI application for `bench_ingest`'s baseline server: Onefold's settings (the same
DATABASE_URL, middleware and connection settings as the server it is compared with),
with `bare_endpoint` as the only URLconf. Started only by the benchmark
(`gunicorn lab.bench.bare_wsgi`)."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
# Read per request by Django's handler, so setting it once the app is loaded is enough.
settings.ROOT_URLCONF = "lab.bench.bare_endpoint"
