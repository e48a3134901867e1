"""/metrics: Prometheus text, for a scraper holding the token or on an allowed network."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
from collections.abc import Iterable

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from idempotency_core.observability.figures import figures_read

logger = logging.getLogger(__name__)


class OnefoldCollector(Collector):
    """The figures of figures.py as gauges, plus `onefold_database_up`: a scrape
    while the database is away still answers, and says so."""

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "onefold_database_up", "1 when the onefold_* figures could be read from the database."
        )
        try:
            figures = figures_read()
        except DatabaseError as exc:
            logger.warning("metrics: the database did not answer (%s)", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        for figure in figures:
            family = GaugeMetricFamily(figure.name, figure.help, labels=list(figure.labels))
            for label_values, value in figure.samples:
                family.add_metric(list(label_values), value)
            yield family


# Its own registry: the collector queries the database, so it must never run
# when something else reads the default registry (auto_describe off: registering
# it does not collect).
ONEFOLD_REGISTRY = CollectorRegistry(auto_describe=False)
ONEFOLD_REGISTRY.register(OnefoldCollector())


def web_registry() -> CollectorRegistry:
    """django-prometheus's figures: every worker's (multiprocess) or this process's."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # unannotated __init__
        return registry
    return REGISTRY


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = metrics_refusal(request)
    if refusal is not None:
        return refusal
    body = generate_latest(web_registry()) + generate_latest(ONEFOLD_REGISTRY)
    response = HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response


def metrics_refusal(request: HttpRequest) -> HttpResponse | None:
    """403 outside the allowed networks (when some are set), 401 without the right
    bearer token (when one is set); None when the request may read the figures."""
    networks = settings.ONEFOLD_METRICS_ALLOW_IPS
    if networks and not _address_in(request.META.get("REMOTE_ADDR", ""), networks):
        return HttpResponse(
            "Forbidden: not an allowed network.\n", status=403, content_type="text/plain"
        )
    token = settings.ONEFOLD_METRICS_TOKEN
    if token and not bearer_matches(request.headers.get("Authorization", ""), token):
        response = HttpResponse(
            "Unauthorized: send Authorization: Bearer <ONEFOLD_METRICS_TOKEN>.\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return None


def bearer_matches(header: str, token: str) -> bool:
    """Constant time in the token's content and length: digests are compared, not
    the texts (compare_digest alone would end early on a length mismatch)."""
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(
        hashlib.sha256(given.strip().encode()).digest(), hashlib.sha256(token.encode()).digest()
    )


def _address_in(
    address: str, networks: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]
) -> bool:
    try:
        client = ipaddress.ip_address(address)
    except ValueError:
        return False
    # A server listening on :: sees an IPv4 client as ::ffff:a.b.c.d.
    if isinstance(client, ipaddress.IPv6Address) and client.ipv4_mapped is not None:
        client = client.ipv4_mapped
    return any(client in network for network in networks)
