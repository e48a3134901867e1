"""The adapters' one reader of their settings: the variables a vendor's
`adapter_from_env` reads from the environment it is given.

A setting reads alike in every vendor: whitespace around a value is no part of it
(a credential pasted with its newline still works), an empty variable is an unset
one and takes the default, and the destination's own base URL (its `base_url`)
stands in for the vendor's URL variable. A problem names the variable, never its
value, which may be a credential. How a problem reaches the operator stays the
vendor's choice (an error at once, or a refusal of every call), so the reader
raises `SettingError` and the adapter decides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class SettingError(ValueError):
    """A setting an adapter cannot use; the message names the variable."""


class AdapterSettings:
    """One vendor's variables in `env`; `base_url`, when given, is the value of
    `url_variable` whatever the environment says."""

    def __init__(
        self, env: Mapping[str, str], *, base_url: str | None = None, url_variable: str = ""
    ) -> None:
        self.env = env
        self.overrides = {url_variable: base_url} if url_variable and base_url else {}

    def get(self, name: str, default: str = "", *, keep_empty: bool = False) -> str:
        """The value of `name`, or `default` when it is unset or empty; with
        `keep_empty`, only when it is unset (a setting whose empty value means "none")."""
        value = self.overrides.get(name, self.env.get(name))
        if value is None:
            return default
        return value.strip() if keep_empty else value.strip() or default

    def url(self, name: str, default: str = "") -> str:
        """A base URL (the destination's own, else `name`, else `default`), without
        its trailing slash."""
        return self.get(name, default).rstrip("/")

    def missing(self, names: Iterable[str]) -> list[str]:
        """Those of `names` (required credentials, an instance URL) not set, in order."""
        return [name for name in names if not self.get(name)]

    def choice(self, name: str, choices: Iterable[str], default: str) -> str:
        """One of `choices`, `default` when unset."""
        allowed = list(choices)
        value = self.get(name, default)
        if value not in allowed:
            raise SettingError(f"{name} must be {' or '.join(allowed)}")
        return value

    def seconds(self, name: str, default: float, *, minimum: float | None = None) -> float:
        """A finite number of seconds, at least `minimum` when one is given; `default`
        when unset."""
        raw = self.get(name)
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        low = -math.inf if minimum is None else minimum
        if not (math.isfinite(value) and value >= low):
            floor = "" if minimum is None else f", {minimum:g} or more"
            raise SettingError(f"{name} must be a number of seconds{floor}")
        return value

    def time_zone(self, name: str) -> str:
        """An IANA time zone's name, UTC when unset."""
        zone = self.get(name, "UTC")
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise SettingError(f"{name} must be an IANA time zone") from None
        return zone
