"""OAuth 2.0 client-credentials tokens (RFC 6749, 4.4), fetched once and refreshed.

Salesforce and Dataverse (through Microsoft Entra ID) hand out bearer tokens for
a client id and secret. One `ClientCredentials` per configured destination keeps
its token in memory, per process, until shortly before it expires (Entra ID
answers `expires_in`; Salesforce does not, so its tokens are kept until the API
answers 401, when the adapter calls `invalidate(token)` and asks once more).

Adapters are built for each attempt, so they take their credentials from
`shared_credentials`, which hands every adapter of the process the same object
for the same token endpoint, client, secret and scope. Without it each attempt
would ask for a token first: twice the calls, and logins that a login rate limit
may refuse (Salesforce's "Login Rate Exceeded", as in
https://github.com/restforce/restforce/issues/412).

The secret and the token never appear in an exception's text or a log line:
errors name the token endpoint and the answer's status only.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from integrations.http import HttpAdapter, classify, json_object, send
from integrations.outcomes import Classification, DestinationError, http_reply

# A token is refreshed this long before the expiry the server announced.
_EARLY_SECONDS = 60.0
# Kept when the server announces no expiry; a 401 refreshes it sooner.
_DEFAULT_LIFETIME_SECONDS = 3600.0


@dataclass
class ClientCredentials:
    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str | None = None
    _token: str | None = field(default=None, init=False, repr=False)
    _expires_at: float = field(default=0.0, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def token(self, *, timeout: httpx.Timeout) -> str:
        """A valid bearer token, fetched when none is held or it is about to expire."""
        with self._lock:
            if self._token is None or time.monotonic() >= self._expires_at:
                self._token, lifetime = self._fetch(timeout)
                self._expires_at = time.monotonic() + max(0.0, lifetime - _EARLY_SECONDS)
            return self._token

    def invalidate(self, refused: str) -> None:
        """Forgets the `refused` token (the API answered 401 to it): the next call fetches
        a new one. A token another thread already fetched in its place is kept."""
        with self._lock:
            if self._token == refused:
                self._token = None

    def _fetch(self, timeout: httpx.Timeout) -> tuple[str, float]:
        form = {
            "grant_type": "client_credentials",
            "client_id": self.client_id,
            "client_secret": self.client_secret,
        }
        if self.scope:
            form["scope"] = self.scope
        response = send("POST", self.token_url, timeout=timeout, data=form)
        body = json_object(response)
        token = body.get("access_token")
        if response.status_code != 200 or not isinstance(token, str) or not token:
            status = response.status_code
            raise DestinationError(
                f"token endpoint {self.token_url} refused the client credentials (HTTP {status})",
                # Asking for a token changes nothing (safe): a busy or failing endpoint is
                # asked again. Wrong credentials stay wrong, and so does an answer
                # without a token.
                classification=classify(status, safe=True) or Classification.PERMANENT,
                reply=http_reply(status),
            )
        lifetime = body.get("expires_in")
        try:
            seconds = float(lifetime) if lifetime is not None else _DEFAULT_LIFETIME_SECONDS
        except (TypeError, ValueError):
            seconds = _DEFAULT_LIFETIME_SECONDS
        return token, seconds


_shared: dict[tuple[str, str, str, str | None], ClientCredentials] = {}
_shared_lock = threading.Lock()


def shared_credentials(
    token_url: str, client_id: str, client_secret: str, scope: str | None = None
) -> ClientCredentials:
    """The process's one `ClientCredentials` for this endpoint, client, secret and scope
    (a rotated secret gets its own). Keyed by the secret's digest, never the secret."""
    digest = hashlib.sha256(client_secret.encode()).hexdigest()
    key = (token_url, client_id, digest, scope)
    with _shared_lock:
        credentials = _shared.get(key)
        if credentials is None:
            credentials = _shared[key] = ClientCredentials(
                token_url, client_id, client_secret, scope
            )
        return credentials


def credentials_forget() -> None:
    """Forgets every shared token of this process (tests; a changed configuration)."""
    with _shared_lock:
        _shared.clear()


class BearerAdapter(HttpAdapter):
    """An HTTP adapter whose requests carry a bearer token of `credentials`. A token
    answered 401 is forgotten; after the first, the request is made once more with a
    new one."""

    credentials: ClientCredentials

    def _token(self) -> str:
        return self.credentials.token(timeout=self.timeout)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = kwargs.pop("headers", None) or {}
        response = None
        for _ in range(2):
            token = self._token()
            bearer = {**headers, "Authorization": f"Bearer {token}"}
            response = super()._send(method, path, headers=bearer, **kwargs)
            if response.status_code != 401:
                return response
            self.credentials.invalidate(token)
        assert response is not None
        return response
