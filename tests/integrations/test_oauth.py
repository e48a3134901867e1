"""Which adapters share a process's OAuth token (`integrations.oauth.shared_credentials`).

Pure logic; that the shared token spares real token calls is shown against the
Dataverse and Salesforce emulators (dataverse/test_dataverse.py,
salesforce/test_salesforce.py).
"""

from __future__ import annotations

from integrations.oauth import credentials_forget, shared_credentials

URL = "https://login.example.com/tenant/oauth2/v2.0/token"


def test_the_same_client_gets_the_same_credentials() -> None:
    first = shared_credentials(URL, "app", "secret-1", "https://org.example.com/.default")
    again = shared_credentials(URL, "app", "secret-1", "https://org.example.com/.default")
    assert again is first


def test_another_endpoint_client_secret_or_scope_gets_its_own() -> None:
    first = shared_credentials(URL, "app", "secret-1", "https://org.example.com/.default")
    others = [
        shared_credentials(URL.replace("tenant", "other"), "app", "secret-1", first.scope),
        shared_credentials(URL, "other-app", "secret-1", first.scope),
        shared_credentials(URL, "app", "rotated-secret", first.scope),
        shared_credentials(URL, "app", "secret-1", "https://other.example.com/.default"),
    ]
    assert len({id(credentials) for credentials in [first, *others]}) == 5
    assert others[2].client_secret == "rotated-secret"


def test_forgetting_drops_every_token() -> None:
    first = shared_credentials(URL, "app", "secret-1")
    credentials_forget()
    assert shared_credentials(URL, "app", "secret-1") is not first


def test_a_401_forgets_the_refused_token_only() -> None:
    """Two threads share the token: the one whose call was refused must not drop the
    token the other has already fetched in its place."""
    credentials = shared_credentials(URL, "app", "secret-1")
    credentials._token, credentials._expires_at = "newer", float("inf")
    credentials.invalidate("older")
    assert credentials._token == "newer"
    credentials.invalidate("newer")
    assert credentials._token is None
