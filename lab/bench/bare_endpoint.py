"""The baseline of `bench_ingest`: a bare DRF endpoint that inserts one row, and beside it
Onefold's ingest service behind the same bare view. Not product code and served by no
product URLconf: only the benchmark's own gunicorn serves them, through `bare_wsgi`
(Onefold's settings, this module as the URLconf).

`/bare/` does what a plain create endpoint does and nothing of what Onefold adds: DRF
parses the JSON body, one INSERT stores the key and the body, 201 answers. No API key,
no validation, no idempotency, no task. The table is the benchmark's own (`BARE_TABLE`,
created by `bench_ingest`), outside Onefold's migrations.

`/service/` is the same view calling Onefold's ingest service (`event_ingest`: the
event, its operations, its delivery and its task in one statement, as the API does)
for the benchmark's source, with none of the API's own work: no API key, no rate, no
validation, no status URL. It splits Onefold's cost in two: the service's (service
against bare) and the API layer's (the API against the service). It stores whatever
body it is sent, so it is served only to the benchmark's own client.
"""

from __future__ import annotations

import json
from functools import cache

from django.db import connection
from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency_core.intake.ingest import event_ingest
from idempotency_core.models import Source

BARE_TABLE = "bench_bare_row"
BARE_PATH = "/bare/"
SERVICE_PATH = "/service/"
# The benchmark's source (`bench_ingest` creates it and lifts its rate).
BENCH_SOURCE_NAME = "bench-ingest"


class BareInsertView(APIView):
    # The project's defaults (session authentication, staff only) would refuse the
    # benchmark's client; the baseline checks nothing.
    authentication_classes = []
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        key = request.headers.get("Idempotency-Key", "")
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {BARE_TABLE} (key, payload) VALUES (%s, %s) RETURNING id",
                [key, json.dumps(request.data)],
            )
            (row_id,) = cursor.fetchone()
        return Response({"id": row_id}, status=201)


class ServiceInsertView(BareInsertView):
    def post(self, request: Request) -> Response:
        payload = request.data
        if not isinstance(payload, dict):  # the benchmark sends objects only
            return Response({"detail": "Send a JSON object."}, status=400)
        result = event_ingest(
            source=_bench_source(), key=request.headers.get("Idempotency-Key", ""), payload=payload
        )
        return Response({"id": str(result.event.pk)}, status=202 if result.created else 200)


@cache
def _bench_source() -> Source:
    return Source.objects.get(name=BENCH_SOURCE_NAME)


urlpatterns = [
    path(BARE_PATH.strip("/") + "/", BareInsertView.as_view()),
    path(SERVICE_PATH.strip("/") + "/", ServiceInsertView.as_view()),
]
