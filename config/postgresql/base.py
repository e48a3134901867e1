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
"""

from __future__ import annotations

import psycopg
from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
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
