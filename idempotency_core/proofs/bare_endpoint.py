"""The baseline of `bench_ingest`: a bare DRF endpoint that inserts one row. Not product
code and served by no product URLconf: only the benchmark's own gunicorn serves it,
through `bare_wsgi` (Onefold's settings, this module as the URLconf).

It does what a plain create endpoint does and nothing of what Onefold adds: DRF parses
the JSON body, one INSERT stores the key and the body, 201 answers. No API key, no
validation, no idempotency, no task. The table is the benchmark's own (`BARE_TABLE`,
created by `bench_ingest`), outside Onefold's migrations.
"""

from __future__ import annotations

import json

from django.db import connection
from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

BARE_TABLE = "bench_bare_row"
BARE_PATH = "/bare/"


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


urlpatterns = [path(BARE_PATH.strip("/") + "/", BareInsertView.as_view())]
