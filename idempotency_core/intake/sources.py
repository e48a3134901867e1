"""Sources: their API keys, and for senders with a hook, their profile and secrets."""

from __future__ import annotations

import ipaddress
import secrets as random_secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from idempotency_core.audit.entries import audit_record
from idempotency_core.config_cache import config_cached
from idempotency_core.execution.steps import pipeline_validate
from idempotency_core.intake.senders.captcha import PROVIDERS as CAPTCHA_PROVIDERS
from idempotency_core.intake.senders.mapping import document_map
from idempotency_core.intake.senders.profiles import API, PRESETS, profile_resolve
from idempotency_core.intake.senders.verifying import token_digest
from idempotency_core.keys import api_key_digest, new_api_key, new_source_salt
from idempotency_core.models import AuditEntry, Source, SourceApiKey, SourceSecret


def source_get_or_create(*, name: str) -> tuple[Source, bool]:
    return Source.objects.get_or_create(name=name, defaults={"key_salt": new_source_salt()})


def source_api_key_issue(*, source: Source) -> str:
    """Creates a new API key and returns it in clear: the only time it is ever seen."""
    key = new_api_key()
    SourceApiKey.objects.create(source=source, prefix=key[:10], digest=api_key_digest(key))
    return key


def source_pipeline_set(*, source: Source, steps: list[str], form: str = "*") -> Source:
    """Sets the steps for one form of the source ("*": every form not named)."""
    validated = pipeline_validate(steps)
    source.pipelines = {**(source.pipelines or {}), form: list(validated)}
    source.save(update_fields=["pipelines"])
    return source


@transaction.atomic
def source_create_with_key(*, name: str) -> tuple[Source, bool, str]:
    source, created = source_get_or_create(name=name)
    return source, created, source_api_key_issue(source=source)


class InvalidProfileError(ValueError):
    """A profile or profile setting that does not exist or does not fit."""


def source_duplicates_set(*, source: Source, policy: str) -> Source:
    """The source's suspected-duplicate policy (intake/duplicate_hold.py): `flag` (both
    submissions are written, a case offers a merge) or `hold` (the later one waits,
    unwritten, until a reviewer decides)."""
    if policy not in ("flag", "hold"):
        raise InvalidProfileError("--duplicates is flag or hold.")
    source.duplicates = policy
    source.save(update_fields=["duplicates"])
    return source


# Hosts a plain-http thank-you page may be on: a site tried out on this machine.
_LOOPBACK_NAMES = ("localhost", "localhost.")


def thank_you_url_check(url: str) -> str:
    """The thank-you URL as given, if a browser may be sent there (303) after an `html`
    form: an absolute https URL, or http on this machine (localhost, 127.0.0.0/8, ::1)
    for a site being tried out. "" (no page) is allowed. Refused: a scheme-relative
    `//evil.example/x` (a browser completes it to any host), another scheme
    (`javascript:`), no host, a user name in it (`https://bank.example@evil.example/`
    reads as the bank), spaces, control characters and other than ASCII (a domain in
    another script is written in its xn-- form: no look-alike letters)."""
    url = url.strip()
    if not url:
        return ""
    refusal = InvalidProfileError(
        f"The thank-you URL {url[:100]!r} must be an absolute https:// URL "
        "(or http:// on localhost), e.g. https://www.example.com/thanks/."
    )
    if len(url) > 500 or not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        raise refusal
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        _ = parts.port  # a port that is no number raises ValueError
    except ValueError:
        raise refusal from None
    if not host or "@" in parts.netloc:
        raise refusal
    if parts.scheme == "https":
        return url
    if parts.scheme == "http" and _loopback(host):
        return url
    raise refusal


def _loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HookSetup:
    """What a sender needs, shown once: the hook's path, and the secrets or token."""

    path: str
    secrets: tuple[str, ...] = ()
    token: str = ""


def source_hook_configure(
    *,
    source: Source,
    profile: str,
    secrets: list[str] | None = None,
    form: str = "",
    thank_you_url: str = "",
    duplicates: str = "flag",
    captcha: str = "",
    captcha_secret: str = "",
) -> HookSetup:
    """Gives a source a sender's profile. A signing profile gets the given secrets (or a
    new random one); a token profile gets a new path token. Returns them in clear:
    the only time they are seen. An `html` source may require a CAPTCHA (`captcha`:
    turnstile, hcaptcha or recaptcha, with the site's `captcha_secret`)."""
    if profile != API and profile not in PRESETS:
        raise InvalidProfileError(
            f"Unknown profile {profile!r}; choose from {', '.join((API, *PRESETS))}."
        )
    if duplicates not in ("flag", "hold"):
        raise InvalidProfileError("--duplicates is flag or hold.")
    thank_you_url = thank_you_url_check(thank_you_url)
    if captcha or captcha_secret:
        source.captcha_provider, source.captcha_secret = _captcha_checked(
            profile, captcha, captcha_secret
        )
    source.profile = profile
    source.default_form = form or source.default_form
    source.thank_you_url = thank_you_url or source.thank_you_url
    source.duplicates = duplicates
    if profile == API:
        source.save()
        return HookSetup(path="")
    with transaction.atomic():
        setup = _hook_credentials(source, profile_resolve(profile).signs, secrets or [])
        source.save()
    return setup


def _hook_credentials(source: Source, signs: bool, given: list[str]) -> HookSetup:
    if signs:
        issued = given or [random_secrets.token_urlsafe(32)]
        for secret in issued:
            source_secret_add(source=source, secret=secret)
        return HookSetup(path=f"/hooks/{source.name}/", secrets=tuple(issued))
    token = random_secrets.token_urlsafe(24)
    source.hook_token_digest = token_digest(token)
    return HookSetup(path=f"/hooks/{source.name}/t/{token}/", token=token)


# RFC 2104, section 3: an HMAC key shorter than the hash's output (32 bytes for the
# SHA-256 every verifier here uses) "is strongly discouraged". Onefold generates 43
# characters (32 random bytes); a provider's own secret (Webflow's client secret,
# HubSpot's app secret) is longer than this too.
SECRET_MIN_LENGTH = 32


def source_secret_add(*, source: Source, secret: str) -> SourceSecret:
    """Adds a signing secret (rotation: the old one keeps verifying until removed)."""
    secret = secret.strip()
    if len(secret) < SECRET_MIN_LENGTH:
        raise InvalidProfileError(
            f"A signing secret needs at least {SECRET_MIN_LENGTH} characters (RFC 2104: an "
            "HMAC-SHA256 key shorter than 32 bytes is strongly discouraged). Leave it out "
            "and Onefold generates one."
        )
    return SourceSecret.objects.create(source=source, secret=secret, prefix=secret[:6])


def source_secret_remove(*, source: Source, prefix: str) -> int:
    """Removes the secrets whose prefix matches; deliveries signed with them fail."""
    removed, _ = source.secrets.filter(prefix=prefix).delete()
    return removed


# -- Console and admin edits of a source: enabled, secrets; each one audited ---------
# Appended as a section of its own (imports included) so that it stays clear of
# concurrent edits to the functions above.


def _source_locked(source: Source, reason: str) -> Source:
    """The source's row, locked until the transaction ends: two edits of one source
    (two admins, a double click) are decided one after the other."""
    if not reason.strip():
        raise InvalidProfileError("Give a reason: it is written to the audit trail.")
    return Source.objects.select_for_update().get(pk=source.pk)


def source_audit(
    source: Source,
    action: str,
    *,
    actor: User | None = None,
    system: str = "",
    reason: str = "",
    **details: Any,
) -> None:
    """An audit entry about a source (console, admin or command): its details name the
    source (`source`, `source_id`) before what the action adds."""
    audit_record(
        action=action,
        actor=actor,
        system=system,
        reason=reason,
        details={"source": source.name, "source_id": source.pk, **details},
    )


def source_enable(*, source: Source, actor: User, enabled: bool, reason: str) -> Source:
    """Enables or disables a source, audited (`source_enabled` / `source_disabled`).
    While disabled, its hook answers 503 with Retry-After and its API keys 403."""
    with transaction.atomic():
        locked = _source_locked(source, reason)
        if locked.is_active == enabled:
            state = "enabled" if enabled else "disabled"
            raise InvalidProfileError(f"{locked.name} is already {state}.")
        locked.is_active = enabled
        locked.save(update_fields=["is_active"])
        source_audit(
            locked, "source_enabled" if enabled else "source_disabled", actor=actor, reason=reason
        )
    source.is_active = enabled
    return locked


def source_settings_change(
    *, source: Source, actor: User, thank_you_url: str, duplicates: str, reason: str
) -> Source:
    """Sets the thank-you URL (checked by `thank_you_url_check`) and the duplicates
    policy, audited as `source_settings_changed` with what changed, old and new."""
    thank_you_url = thank_you_url_check(thank_you_url)
    if duplicates not in ("flag", "hold"):
        raise InvalidProfileError("Duplicates is flag or hold.")
    with transaction.atomic():
        locked = _source_locked(source, reason)
        changes = {
            name: {"from": getattr(locked, name), "to": value}
            for name, value in (("thank_you_url", thank_you_url), ("duplicates", duplicates))
            if getattr(locked, name) != value
        }
        if not changes:
            raise InvalidProfileError(f"{locked.name} already has these settings.")
        for name, change in changes.items():
            setattr(locked, name, change["to"])
        locked.save(update_fields=list(changes))
        source_audit(locked, "source_settings_changed", actor=actor, reason=reason, changes=changes)
    return locked


def source_secret_issue(
    *, source: Source, actor: User, reason: str, secret: str = ""
) -> SourceSecret:
    """Adds a signing secret to a source whose profile signs: `secret` as typed, or a
    new random one. Audited as `source_secret_added` naming only its prefix. The
    returned row holds the secret in clear for the caller to show once.

    A secret whose prefix another of the source's secrets has is refused: secrets are
    removed by prefix, and one removal must not take two."""
    preset = PRESETS.get(source.profile)
    if preset is None or not preset.signs:
        raise InvalidProfileError(
            f"The {source.profile} profile does not sign its deliveries; "
            "its sender has no secret to verify."
        )
    clear = secret.strip() or random_secrets.token_urlsafe(32)
    with transaction.atomic():
        locked = _source_locked(source, reason)
        if locked.secrets.filter(prefix=clear[:6]).exists():
            raise InvalidProfileError(
                f"{locked.name} already has a secret starting with {clear[:6]}; "
                "secrets are removed by prefix, so choose one that starts differently."
            )
        added = source_secret_add(source=locked, secret=clear)
        source_audit(
            locked,
            "source_secret_added",
            actor=actor,
            reason=reason,
            prefix=added.prefix,
            generated=not secret.strip(),
        )
    return added


def source_secret_revoke(*, source: Source, actor: User, prefix: str, reason: str) -> int:
    """Removes the source's secrets with `prefix`, audited as `source_secret_removed`
    (the prefix only). Deliveries signed with them are refused (401) from now on."""
    with transaction.atomic():
        locked = _source_locked(source, reason)
        removed = source_secret_remove(source=locked, prefix=prefix)
        if not removed:
            raise InvalidProfileError(f"{locked.name} has no secret starting with {prefix}.")
        source_audit(
            locked,
            "source_secret_removed",
            actor=actor,
            reason=reason,
            prefix=prefix,
            removed=removed,
            remaining=locked.secrets.count(),
        )
    return removed


# -- API keys: a source created once, keys rotated with an overlap, revoked by prefix ----
# Appended as a section of its own (imports included), clear of concurrent edits above.
# A key works while it is neither revoked nor past the end of its rotation overlap.


# The module, not the name: the section above imports `audit_record` itself.

# The part of a key stored in clear (`source_api_key_issue`), to recognise it by.
API_KEY_PREFIX_LENGTH = 10


class SourceExistsError(ValueError):
    """`create_source` for a name that exists: nothing is changed."""


class SourceNotFoundError(ValueError):
    """No source has that name."""


class ApiKeyNotFoundError(ValueError):
    """No API key starts with the prefix given."""


class ApiKeyAmbiguousError(ValueError):
    """Several working keys start with the prefix given; `matches` lists them."""

    def __init__(self, message: str, matches: list[SourceApiKey]) -> None:
        super().__init__(message)
        self.matches = matches


def _working_api_keys(now: datetime) -> QuerySet[SourceApiKey]:
    return SourceApiKey.objects.filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now), revoked_at__isnull=True
    )


def source_for_working_api_key(key: str, *, now: datetime | None = None) -> Source | None:
    """The source a key identifies, if the key works now: not revoked, and not past the
    end of the overlap a rotation gave it. What the ingest API authenticates with.

    The key's row (with its source) comes from the per-process cache when it may be
    trusted (config_cache.py: a revocation, a rotation or a change of the source empties
    it in every process); its end is compared with the clock here, at every use."""
    digest = api_key_digest(key)
    found = config_cached(("api_key", digest), lambda: _unrevoked_api_key(digest))
    if found is None:
        return None
    if found.expires_at is not None and found.expires_at <= (now or timezone.now()):
        return None
    return found.source


def _unrevoked_api_key(digest: str) -> SourceApiKey | None:
    return (
        SourceApiKey.objects.filter(digest=digest, revoked_at__isnull=True)
        .select_related("source")
        .first()
    )


def source_create(*, name: str) -> Source:
    """Creates a source. One that exists is refused and left exactly as it is: a second
    `create_source` must not add a key beside the first, leaving a leaked one valid."""
    refusal = SourceExistsError(
        f"Source {name!r} exists; nothing was changed. For a new API key run "
        f"`manage.py rotate_key {name}` (the old key keeps working for "
        "--overlap-seconds, default 86400); a sender's profile and secrets are edited "
        "on the console's source page."
    )
    if Source.objects.filter(name=name).exists():  # the message; the constraint decides
        raise refusal
    try:
        with transaction.atomic():
            return Source.objects.create(name=name, key_salt=new_source_salt())
    except IntegrityError:
        raise refusal from None


@dataclass(frozen=True)
class KeyRotation:
    """A new key (in clear: the only time it is seen) and the keys it replaces, each
    with the moment it stops working."""

    key: str
    prefix: str
    retiring: tuple[tuple[str, datetime], ...]


def source_api_key_rotate(*, name: str, overlap: timedelta) -> KeyRotation:
    """Issues a new key for the source and ends its working keys `overlap` from now (a key
    already ending sooner keeps its end; a zero overlap ends them at once). Audited as
    `api_key_rotated`, naming prefixes only."""
    if overlap < timedelta(0):
        raise ValueError("The overlap cannot be negative.")
    with transaction.atomic():
        # The source's row lock orders two rotations of one source.
        source = Source.objects.select_for_update().filter(name=name).first()
        if source is None:
            raise SourceNotFoundError(f"No source is named {name!r}.")
        now = timezone.now()
        ends = now + overlap
        working = SourceApiKey.objects.filter(
            pk__in=list(_working_api_keys(now).filter(source=source).values_list("pk", flat=True))
        )
        working.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=ends)).update(expires_at=ends)
        retiring = tuple(
            (prefix, end or ends)
            for prefix, end in working.order_by("created_at").values_list("prefix", "expires_at")
        )
        key = source_api_key_issue(source=source)
        source_audit(
            source,
            "api_key_rotated",
            system="rotate_key",
            new_prefix=key[:API_KEY_PREFIX_LENGTH],
            overlap_seconds=overlap.total_seconds(),
            retiring=[
                {"prefix": prefix, "expires_at": end.isoformat()} for prefix, end in retiring
            ],
        )
    return KeyRotation(key=key, prefix=key[:API_KEY_PREFIX_LENGTH], retiring=retiring)


@dataclass(frozen=True)
class KeyRevocation:
    prefix: str
    source_name: str
    revoked_at: datetime
    # False when the key had already stopped working (revoked, or its overlap ended).
    was_working: bool


def api_key_revoke(*, prefix: str) -> KeyRevocation:
    """Revokes, at once, the one working key that starts with `prefix` (its first
    characters, as `create_source` and `rotate_key` print them, or the whole key).
    Audited as `api_key_revoked`. Refused when no key matches, or when several working
    keys do (ApiKeyAmbiguousError lists them: revoking the wrong one is worse)."""
    prefix = prefix.strip()
    if not prefix or not prefix.isascii() or not prefix.isprintable():
        raise ApiKeyNotFoundError("Give the first characters of the key, e.g. ofk_AbC123.")
    with transaction.atomic():
        now = timezone.now()
        exact = SourceApiKey.objects.filter(digest=api_key_digest(prefix))
        candidates = (
            exact
            if exact.exists()
            else SourceApiKey.objects.filter(prefix__startswith=prefix[:API_KEY_PREFIX_LENGTH])
        )
        matches = list(candidates.select_for_update(of=("self",)).select_related("source"))
        if not matches:
            raise ApiKeyNotFoundError(f"No API key starts with {prefix[:API_KEY_PREFIX_LENGTH]}.")
        working = _working_api_keys(now).filter(pk__in=[k.pk for k in matches])
        chosen = list(working.select_related("source").order_by("created_at"))
        if len(chosen) > 1:
            raise ApiKeyAmbiguousError(
                f"{len(chosen)} working keys start with {prefix}; give more characters.",
                chosen,
            )
        if not chosen:
            latest = max(matches, key=lambda k: k.revoked_at or k.expires_at or k.created_at)
            return KeyRevocation(
                prefix=latest.prefix,
                source_name=latest.source.name,
                revoked_at=latest.revoked_at or latest.expires_at or now,
                was_working=False,
            )
        (key,) = chosen
        SourceApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=now)
        source_audit(key.source, "api_key_revoked", system="revoke_key", prefix=key.prefix)
    return KeyRevocation(
        prefix=key.prefix, source_name=key.source.name, revoked_at=now, was_working=True
    )


# -- The html profile's CAPTCHA (intake/senders/captcha.py) ----------------------------
# Appended as a section of its own, clear of concurrent edits above.

CAPTCHA_PROFILE = "html"


def _captcha_checked(profile: str, provider: str, secret: str) -> tuple[str, str]:
    """(provider, secret) as a source stores them, or InvalidProfileError. "" and ""
    remove the CAPTCHA."""
    provider, secret = provider.strip(), secret.strip()
    if not provider:
        if secret:
            raise InvalidProfileError("A CAPTCHA secret needs its provider (--captcha).")
        return "", ""
    if provider not in CAPTCHA_PROVIDERS:
        raise InvalidProfileError(
            f"Unknown CAPTCHA {provider!r}; choose from {', '.join(CAPTCHA_PROVIDERS)}."
        )
    if profile != CAPTCHA_PROFILE:
        raise InvalidProfileError(
            "Only the html profile (a form in a visitor's browser) takes a CAPTCHA; a form "
            "provider checks its own before it sends."
        )
    if len(secret) < 8:
        raise InvalidProfileError(
            f"The {CAPTCHA_PROVIDERS[provider].label} secret key is needed (at least 8 "
            "characters): siteverify checks each token with it."
        )
    return provider, secret


def source_captcha_set(
    *, source: Source, actor: User, provider: str, secret: str, reason: str
) -> Source:
    """Requires (or, with provider "", no longer requires) a CAPTCHA on the source's form.
    A blank `secret` keeps the stored one when the provider stays the same. Audited as
    `source_captcha_set`, naming the providers and the secret's first characters only."""
    with transaction.atomic():
        locked = _source_locked(source, reason)
        if not secret.strip() and provider.strip() == locked.captcha_provider:
            secret = locked.captcha_secret
        chosen, kept = _captcha_checked(locked.profile, provider, secret)
        if (chosen, kept) == (locked.captcha_provider, locked.captcha_secret):
            raise InvalidProfileError("Nothing to change: that is the source's CAPTCHA already.")
        before = locked.captcha_provider
        locked.captcha_provider, locked.captcha_secret = chosen, kept
        locked.save(update_fields=["captcha_provider", "captcha_secret"])
        source_audit(
            locked,
            "source_captcha_set",
            actor=actor,
            reason=reason,
            provider=chosen,
            previous_provider=before,
            secret_prefix=kept[:CAPTCHA_SECRET_SHOWN],
        )
    source.captcha_provider, source.captcha_secret = chosen, kept
    return locked


# The first characters of a CAPTCHA secret shown on the console and in the audit, to
# recognise it, as a signing secret's prefix.
CAPTCHA_SECRET_SHOWN = 6


# -- A hook's field map (the console's field-map editor) -------------------------------

# The targets a source's map may replace in its preset's.
FIELD_MAP_TARGETS = ("name", "email", "phone", "message", "extras")


def source_field_map_set(
    *, source: Source, actor: User, field_map: dict[str, Any], reason: str
) -> int:
    """Saves the source's field map (`profile_overrides["field_map"]`) as a new, audited
    version, refused when the profile cannot apply it. Kept deliveries change only when
    the map is applied to them (`remap.events_remap`). Returns the version."""
    if source.profile not in PRESETS:
        raise InvalidProfileError(f"{source.name} posts the JSON API: it has no field map.")
    unknown = set(field_map) - set(FIELD_MAP_TARGETS)
    if unknown:
        raise InvalidProfileError(f"Unknown field-map targets: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        locked = _source_locked(source, reason)
        overrides = dict(locked.profile_overrides or {})
        before = overrides.get("field_map") or {}
        if field_map == before:
            raise InvalidProfileError("Nothing to change: that is the source's field map already.")
        overrides["field_map"] = field_map
        if not field_map:
            del overrides["field_map"]
        _field_map_checked(locked.profile, overrides)
        locked.profile_overrides = overrides
        locked.save(update_fields=["profile_overrides"])
        version = _field_map_versions(locked) + 1
        source_audit(
            locked,
            "field_map_saved",
            actor=actor,
            reason=reason,
            version=version,
            field_map=field_map,
            previous=before,
        )
    source.profile_overrides = locked.profile_overrides
    return version


def _field_map_versions(source: Source) -> int:
    return AuditEntry.objects.filter(action="field_map_saved", details__source_id=source.pk).count()


def _field_map_checked(profile: str, overrides: dict[str, Any]) -> None:
    """Refuses a map the profile cannot apply: a malformed expression would leave
    every later delivery unreadable."""
    try:
        resolved = profile_resolve(profile, overrides)
        document_map(resolved.field_map, {})
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidProfileError(f"The field map cannot be applied: {exc}") from exc
