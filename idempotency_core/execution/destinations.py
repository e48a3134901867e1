"""Which destination a step talks to, the adapter that speaks to it, and whether it may."""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

import httpx
from django.conf import settings
from django.db.models import Q

from idempotency_core.configuration.document import configured_names
from idempotency_core.configuration.versions import config_current
from idempotency_core.execution.budget import BudgetGate, budget_for
from idempotency_core.models import Destination, DestinationBudget, Source
from integrations.base import (
    Adapter,
    Capabilities,
    CapabilityCheck,
    Classification,
    ConfiguredCrmNames,
    CrmAdapter,
    DestinationError,
    EmailAdapter,
    Gated,
)
from integrations.http import send, timeout_of
from integrations.sandbox.adapter import SandboxCrm
from integrations.smtp.adapter import SmtpSender

logger = logging.getLogger(__name__)

Kind = Destination.Kind

# Vendor adapters, imported on first use: `module:function`, the function being
# adapter_from_env(*, base_url, timeout, env) -> the adapter.
FACTORIES: dict[str, str] = {
    Kind.HUBSPOT: "integrations.hubspot.adapter:adapter_from_env",
    Kind.SALESFORCE: "integrations.salesforce.adapter:adapter_from_env",
    Kind.PIPEDRIVE: "integrations.pipedrive.adapter:adapter_from_env",
    Kind.DATAVERSE: "integrations.dataverse.adapter:adapter_from_env",
    Kind.RESEND: "integrations.resend.adapter:adapter_from_env",
}

# ONEFOLD_CRM / ONEFOLD_EMAIL values and the kind each one names.
CRM_CHOICES: dict[str, str] = {
    "sandbox": Kind.CRM_HTTP,
    "hubspot": Kind.HUBSPOT,
    "salesforce": Kind.SALESFORCE,
    "pipedrive": Kind.PIPEDRIVE,
    "dataverse": Kind.DATAVERSE,
}
EMAIL_CHOICES: dict[str, str] = {"smtp": Kind.SMTP, "resend": Kind.RESEND}

# The sandbox's capability names (docs/destinations.md, "The sandbox and SMTP").
SANDBOX_CAPABILITIES = ("idempotency_keys", "unique_external_ref", "lookup")
# A capability read must not hold up a worker or a console page for long.
_CAPABILITY_READ_SECONDS = 2.0


class NotACrmError(LookupError):
    """The destination is not a CRM (a lookup or a listing was asked of a mail relay)."""


class AdapterUnavailableError(DestinationError):
    """The destination's kind has no adapter installed here: nothing can be sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message, classification=Classification.RETRYABLE)


class DestinationRefusedError(DestinationError):
    """The destination's declared capabilities do not hold (or could not be checked):
    it is not called. Retryable: a corrected configuration is used at the next check.
    `unreachable`: it could not be asked at all (no answer, no credentials)."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message, classification=Classification.RETRYABLE)
        self.unreachable = unreachable


def destination_for(source: Source, role: str) -> Destination:
    """The source's own destination for a role, else the default one of that name."""
    override = {"crm": source.crm, "email": source.mailer}.get(role)
    return override or Destination.objects.get(name=role)


def kind_of(destination: Destination) -> str:
    """The kind in force: ONEFOLD_CRM / ONEFOLD_EMAIL for the default "crm" and
    "email" destinations, the row's own kind for any other."""
    if destination.name == "crm":
        return CRM_CHOICES[settings.ONEFOLD_CRM]
    if destination.name == "email":
        return EMAIL_CHOICES[settings.ONEFOLD_EMAIL]
    return str(destination.kind)


def is_crm(destination: Destination) -> bool:
    return kind_of(destination) in Destination.CRM_KINDS


def adapter_for(
    destination: Destination,
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> Adapter:
    """The adapter for `destination`. No network call (docs/internals.md).

    `timeout` (seconds) overrides ONEFOLD_HTTP_TIMEOUT_SECONDS, e.g. for long listings.
    `env`: the variables its settings are read from (the environment by default).
    Raises `AdapterUnavailableError` for a kind whose adapter is not installed.
    """
    timeout = timeout or settings.ONEFOLD_HTTP_TIMEOUT_SECONDS
    env = os.environ if env is None else env
    kind = kind_of(destination)
    if kind == Kind.SMTP:
        host, _, port = destination.base_url.partition(":")
        return SmtpSender(
            host or settings.EMAIL_HOST,
            int(port or settings.EMAIL_PORT),
            timeout=timeout,
            sender=settings.DEFAULT_FROM_EMAIL,
        )
    if kind == Kind.CRM_HTTP:
        return LiveSandboxCrm(
            destination.base_url or settings.DESTINATION_URL, timeout=timeout, env=env
        )
    factory = adapter_factory(kind)
    try:
        adapter: Adapter = factory(base_url=destination.base_url or None, timeout=timeout, env=env)
        budget = budget_for(destination, adapter.request_budget)
    except (ValueError, KeyError, TypeError) as exc:
        # A setting the adapter cannot use: nothing can be sent until it is corrected.
        raise AdapterUnavailableError(f"the {kind} adapter is misconfigured: {exc}") from exc
    if budget is not None and hasattr(adapter, "gate"):
        # Every request it makes, whoever asks (a step, a verification, a console
        # lookup, a worker's start), within the destination's shared budget.
        cast(Gated, adapter).gate = BudgetGate(destination, budget)
    return adapter


def adapter_factory(kind: str) -> Callable[..., Any]:
    """The vendor's `adapter_from_env`, imported now; a clear error when it is absent."""
    path = FACTORIES.get(kind)
    if path is None:
        raise AdapterUnavailableError(f"no adapter for destination kind {kind!r}")
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise AdapterUnavailableError(
                f"the {kind} adapter is not installed ({module_name} is missing)"
            ) from exc
        raise
    factory: Callable[..., Any] = getattr(module, attribute)
    return factory


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
    """The destination's capabilities, as its adapter reports them now.

    A network read only for the sandbox (bounded; docs/internals.md).
    An adapter that cannot be built offers nothing: recovery then goes to review.
    """
    try:
        return adapter_for(destination).capabilities
    except AdapterUnavailableError:
        return Capabilities()


# -- the sandbox: capabilities as it reports them -----------------------------------


class LiveSandboxCrm(SandboxCrm):
    """The sandbox's adapter, its capabilities read from the sandbox when first asked.

    `SANDBOX_CAPABILITIES` in `env` declares what the sandbox must offer (checked
    by `verify()`); unset, the declaration is whatever the sandbox reports.
    """

    def __init__(self, base_url: str, *, timeout: float, env: Mapping[str, str]) -> None:
        super().__init__(base_url, timeout=timeout)
        raw = env.get("SANDBOX_CAPABILITIES")
        self.declared = (
            None
            if raw is None
            else frozenset(name.strip() for name in raw.split(",") if name.strip())
        )
        self._capabilities: Capabilities | None = None
        settle = env.get("SANDBOX_LOOKUP_SETTLE_SECONDS")
        self.lookup_settle_seconds = None if settle is None else max(0.0, float(settle))

    @property
    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            try:
                reported = sandbox_capabilities(self._report(_CAPABILITY_READ_SECONDS))
                if self.lookup_settle_seconds is not None:
                    reported = replace(
                        reported,
                        lookup_proves_absence=False,
                        lookup_settle_seconds=self.lookup_settle_seconds,
                    )
                self._capabilities = reported
            except DestinationError as exc:
                logger.warning("sandbox capabilities unknown (%s): treated as none", exc.message)
                self._capabilities = Capabilities()
        return self._capabilities

    @capabilities.setter
    def capabilities(self, value: Capabilities) -> None:
        # SandboxCrm.__init__ assigns its default; the live report replaces it.
        self._capabilities = None

    def verify(self) -> list[CapabilityCheck]:
        """Each declared capability against what GET /_sandbox/capabilities reports."""
        reported = self._report(self.timeout.read or _CAPABILITY_READ_SECONDS)
        names = self.declared
        if names is None:
            names = frozenset(name for name in SANDBOX_CAPABILITIES if reported.get(name) is True)
        checks = []
        for name in sorted(names):
            holds = reported.get(name) is True
            how = f"GET /_sandbox/capabilities: {name}={str(reported.get(name)).lower()}"
            checks.append(CapabilityCheck(name, holds, how))
        return checks

    def _report(self, seconds: float) -> dict[str, Any]:
        response = send(
            "GET", self.base_url + "/_sandbox/capabilities", timeout=timeout_of(seconds)
        )
        self._raise_for_status(response)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise DestinationError(
                "GET /_sandbox/capabilities answered no JSON object",
                classification=Classification.RETRYABLE,
            )
        return data


def sandbox_capabilities(reported: Mapping[str, Any]) -> Capabilities:
    """The sandbox's report as `Capabilities`. Its lookup reads its own store (no lag),
    and it always offers merge (POST /crm/records/<id>/merge)."""
    ttl = reported.get("idempotency_key_ttl_seconds")
    return Capabilities(
        idempotency_keys=reported.get("idempotency_keys") is True,
        key_retention=timedelta(seconds=float(ttl)) if isinstance(ttl, int | float) else None,
        unique_external_ref=reported.get("unique_external_ref") is True,
        lookup=reported.get("lookup") is True,
        lookup_proves_absence=True,
        merge=True,
    )


# -- verification, as the workers do it -------------------------------------------

_verified_lock = threading.Lock()
# configuration (`_configuration_key`) -> (monotonic time the result expires, refusal or "")
_verified: dict[tuple[str, ...], tuple[float, str]] = {}
# A destination (`_where`) -> the variables its last verification read.
_read_by: dict[tuple[str, ...], tuple[str, ...]] = {}


class _Reading(Mapping[str, str]):
    """`env`, noting each variable asked for and what it held (None: unset), or that it
    was read whole (`whole`): what a verification read of the environment."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.read: dict[str, str | None] = {}
        self.whole = False

    def __getitem__(self, name: str) -> str:
        value = self.read[name] = self.env.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        self.whole = True
        return iter(self.env)

    def __len__(self) -> int:
        self.whole = True
        return len(self.env)


def _where(destination: Destination) -> tuple[str, ...]:
    """The destination, its kind and URL, and the settings' URLs."""
    urls = f"{settings.DESTINATION_URL} {settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    return (destination.name, kind_of(destination), destination.base_url, urls)


def _digest(read: list[tuple[str, str | None]]) -> str:
    """Variables and their values as a digest: no credential is kept."""
    return hashlib.sha256(repr(read).encode()).hexdigest()


def _configuration_key(where: tuple[str, ...]) -> tuple[str, ...]:
    """What a verification of the destination `where` (`_where`) holds for: that, and
    the values of the variables its adapter read when it was last verified
    (`_read_by`), or of the whole environment before that or when the adapter read the
    whole of it. A change of any other variable cannot change what a verification
    finds, and reading only these for each attempt, not every variable (each one
    decoded), was a visible share of a worker's chain. Call with `_verified_lock` held."""
    names = _read_by.get(where)
    if names is None:
        return _whole_environment_key(where)
    return (*where, _digest([(name, os.environ.get(name)) for name in names]))


def _whole_environment_key(where: tuple[str, ...]) -> tuple[str, ...]:
    return (*where, _digest(sorted(os.environ.items())))


def _verified_key(where: tuple[str, ...], reading: _Reading) -> tuple[str, ...]:
    """The key a verification that read `reading` is kept under: `_configuration_key`
    while the variables it read hold the values it read (noted in `_read_by`). Call with
    `_verified_lock` held."""
    if reading.whole:
        _read_by.pop(where, None)
        return _whole_environment_key(where)
    read = sorted(reading.read.items())
    _read_by[where] = tuple(name for name, _ in read)
    return (*where, _digest(read))


def destination_checks(
    destination: Destination,
    *,
    rate_limits_raise: bool = False,
    env: Mapping[str, str] | None = None,
) -> list[CapabilityCheck]:
    """The destination's declared capabilities checked against it (network calls).

    A destination that cannot be built or reached gives one refused check,
    "reachable", with the reason. `rate_limits_raise`: a rate limit's refusal is
    raised instead (a worker waits for it: the destination said nothing of its
    capabilities). `env`: as `adapter_for`'s."""
    try:
        return list(adapter_for(destination, env=env).verify())
    except DestinationError as exc:
        if exc.rate_limit and rate_limits_raise:
            raise
        return [CapabilityCheck("reachable", False, exc.message)]
    except httpx.HTTPError as exc:
        return [CapabilityCheck("reachable", False, f"{type(exc).__name__}: {exc}")]


def destination_configured_names(destination: Destination) -> ConfiguredCrmNames:
    """Every property and assignee the current business configuration names, over the
    active sources whose CRM is `destination` (a source's own, else the default "crm")."""
    document = config_current().document
    configured = sorted((document.get("sources") or {}).keys())
    found: dict[str, set[str]] = {"enquiry": set(), "contact": set(), "assignees": set()}
    for source in Source.objects.filter(is_active=True, name__in=configured).order_by("name"):
        if destination_for(source, "crm").pk != destination.pk:
            continue
        names = configured_names(document, source.name)
        found["enquiry"] |= names.enquiry_properties
        found["contact"] |= names.contact_properties
        found["assignees"] |= names.assignees
    return ConfiguredCrmNames(
        enquiry_properties=frozenset(found["enquiry"]),
        contact_properties=frozenset(found["contact"]),
        assignees=frozenset(found["assignees"]),
    )


def destination_name_checks(destination: Destination) -> list[CapabilityCheck]:
    """The configured names `destination` must know, checked against it (network calls):
    one check per property and assignee, none when it is no CRM or nothing is named. A
    CRM that cannot be asked gives one refused check, "configured names", with why."""
    if not is_crm(destination):
        return []
    names = destination_configured_names(destination)
    if not names:
        return []
    try:
        return list(crm_adapter_for(destination).names_check(names))
    except DestinationError as exc:
        return [CapabilityCheck("configured names", False, exc.message)]
    except httpx.HTTPError as exc:
        return [CapabilityCheck("configured names", False, f"{type(exc).__name__}: {exc}")]


def destination_refusal(checks: list[CapabilityCheck]) -> str:
    """Why the destination is refused ("" when every check holds)."""
    return "; ".join(f"{c.capability}: {c.how}" for c in checks if not c.verified)


def destination_ready(
    destination: Destination, *, now: float | None = None, fresh: bool = False
) -> None:
    """Raises `DestinationRefusedError` unless the destination's declaration holds.

    Verified on first use, after ONEFOLD_VERIFY_TTL_SECONDS, on a configuration change,
    or when `fresh`; a refusal is remembered for ONEFOLD_VERIFY_RETRY_SECONDS.
    """
    now = time.monotonic() if now is None else now
    where = _where(destination)
    with _verified_lock:
        cached = None if fresh else _verified.get(_configuration_key(where))
    unreachable = False
    if cached is None or cached[0] <= now:
        reading = _Reading(os.environ)
        checks = destination_checks(destination, rate_limits_raise=True, env=reading)
        refusal = destination_refusal(checks)
        unreachable = any(c.capability == "reachable" for c in checks)
        if refusal:
            logger.warning("destination %s refused: %s", destination.name, refusal)
        else:
            destination_resume(destination, kind=DestinationBudget.Pause.REFUSED)
        if not unreachable:
            ttl = (
                settings.ONEFOLD_VERIFY_RETRY_SECONDS
                if refusal
                else settings.ONEFOLD_VERIFY_TTL_SECONDS
            )
            with _verified_lock:
                _verified[_verified_key(where, reading)] = (now + ttl, refusal)
        cached = (now, refusal)
    if cached[1]:
        raise DestinationRefusedError(
            f"destination {destination.name} refused, not called: {cached[1]}",
            unreachable=unreachable,
        )


def destination_resume(destination: Destination, *, kind: str) -> None:
    """Ends the destination's pause of `kind`, if one is in force (one UPDATE, made only
    when a verification was asked of the destination)."""
    DestinationBudget.objects.filter(
        destination=destination, pause_kind=kind, paused_until__isnull=False
    ).update(paused_until=None, pause_kind="", pause_reason="", paused_at=None)


def verification_forget() -> None:
    """Forgets every verification of this process (tests; a changed configuration)."""
    with _verified_lock:
        _verified.clear()
        _read_by.clear()


def destinations_in_use() -> list[Destination]:
    """The default "crm" and "email" destinations and those an active source names."""
    active = Source.objects.filter(is_active=True)
    return list(
        Destination.objects.filter(
            Q(name__in=("crm", "email"))
            | Q(pk__in=active.values("crm"))
            | Q(pk__in=active.values("mailer"))
        ).order_by("name")
    )


def destinations_verify_all(**_: Any) -> None:
    """Verifies every destination in use, for this process's cache (a worker's start).

    Connected to django-q2's `post_spawn`: never raises, so a refused or
    unreachable destination cannot stop the cluster; it is logged, and the
    workers refuse it when a step would use it."""
    try:
        destinations = destinations_in_use()
    except Exception as exc:  # the database may not be ready; the first use verifies
        logger.warning("destinations not verified at worker start: %s", type(exc).__name__)
        return
    for destination in destinations:
        try:
            destination_ready(destination)
        except DestinationRefusedError:
            pass  # logged by destination_ready
        except Exception as exc:
            logger.warning(
                "destination %s not verified at worker start: %s",
                destination.name,
                type(exc).__name__,
            )
