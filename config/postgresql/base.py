"""Django's PostgreSQL backend, but for `is_usable`: the settings' ENGINE on PostgreSQL.

With persistent connections (DATABASE_CONN_MAX_AGE) and CONN_HEALTH_CHECKS, Django
asks a connection whether it still works before it is reused, with `SELECT 1`: a round
trip before every web request, every worker task, and every call of django-q2's ORM
broker (its pusher and monitor close old connections before each). In a worker cluster
under load that round trip was a large share of its time (docs/benchmarks.md).

What that round trip finds out, a non-blocking read of the socket finds out without
asking: a terminated backend, a server restart or an idle timeout arrives as a FATAL
message and the end of the stream, which leaves libpq's connection BAD once read. So
`is_usable` reads what has arrived and looks at the connection's state. A connection
the network dropped silently answers neither check until a query times out; that is
the same with `SELECT 1`.

And `last_executed_query` for a server-binding cursor (the prepared statements' in
idempotency_core/sql.py), which psycopg gives no query text: composed as Django does
for every cursor under `server_side_binding`.
"""

from __future__ import annotations

import psycopg
from django.db.backends.postgresql import base, operations
from psycopg import pq


class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor: object, sql: str, params: object) -> str:
        if isinstance(cursor, psycopg.ClientCursor):
            return super().last_executed_query(cursor, sql, params)
        try:
            return str(self.compose_sql(sql, params))
        except psycopg.DataError:
            return sql  # a value the client cannot quote: the statement as written


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def is_usable(self) -> bool:
        if self.connection is None:
            return False
        try:
            with self.connection.lock:
                pgconn = self.connection.pgconn
                pgconn.consume_input()  # notifications stay queued for their reader
                # What SELECT 1 would also accept: idle, or in a transaction that
                # has not failed.
                return bool(
                    pgconn.status == pq.ConnStatus.OK
                    and pgconn.transaction_status
                    in (pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS)
                )
        except psycopg.Error:
            return False
