"""Which destination a step talks to, and the adapter that speaks to it.

The one place that knows which adapter class serves which kind of destination:
steps, the engine and reviewers' services ask here and see only the
`CrmAdapter` / `EmailAdapter` interfaces. Building an adapter makes no network
call, so its `Capabilities` (what it can recognise of a repeat) can be read
anywhere, the console's replay preview included.
"""

from __future__ import annotations

from django.conf import settings

from idempotency_core.models import Destination, Source
from integrations.base import Adapter, Capabilities, CrmAdapter, EmailAdapter
from integrations.sandbox.adapter import SandboxCrm
from integrations.smtp.adapter import SmtpSender


class NotACrmError(LookupError):
    """The destination is not a CRM (a lookup or a listing was asked of a mail relay)."""


def destination_for(source: Source, role: str) -> Destination:
    """The source's own destination for a role, else the default one of that name."""
    override = {"crm": source.crm, "email": source.mailer}.get(role)
    return override or Destination.objects.get(name=role)


def declared_capabilities(destination: Destination) -> Capabilities:
    """What the destination's configuration says it offers (the sandbox runs profiles)."""
    return Capabilities(
        idempotency_keys=destination.idempotency_keys,
        key_retention=destination.idempotency_key_retention,
        unique_external_ref=destination.unique_external_ref,
        lookup=destination.lookup,
        merge=destination.merge,
    )


def adapter_for(destination: Destination, *, timeout: float | None = None) -> Adapter:
    """The adapter for `destination`, carrying its capabilities. No network call.

    `timeout` (seconds) overrides ONEFOLD_HTTP_TIMEOUT_SECONDS, e.g. for long listings.
    """
    timeout = timeout or settings.ONEFOLD_HTTP_TIMEOUT_SECONDS
    if destination.kind == Destination.Kind.SMTP:
        host, _, port = destination.base_url.partition(":")
        return SmtpSender(
            host or settings.EMAIL_HOST,
            int(port or settings.EMAIL_PORT),
            timeout=timeout,
            sender=settings.DEFAULT_FROM_EMAIL,
        )
    return SandboxCrm(
        destination.base_url or settings.DESTINATION_URL,
        timeout=timeout,
        capabilities=declared_capabilities(destination),
    )


def crm_adapter_for(destination: Destination, *, timeout: float | None = None) -> CrmAdapter:
    adapter = adapter_for(destination, timeout=timeout)
    if not isinstance(adapter, CrmAdapter):
        raise NotACrmError(f"{destination.name} is not a CRM")
    return adapter


def email_adapter_for(destination: Destination) -> EmailAdapter:
    adapter = adapter_for(destination)
    if not isinstance(adapter, EmailAdapter):
        raise TypeError(f"{destination.name} is not a mail service")
    return adapter


def capabilities_of(destination: Destination) -> Capabilities:
    """The destination's capabilities, as its adapter reports them. No network call."""
    return adapter_for(destination).capabilities
