"""The Salesforce emulator over HTTP: the REST API paths Onefold's adapter calls.

Routing, bearer-token checks and faults live here; the org's state and every
answer's shape live in `store.py` (whose docstring names the documentation each
behaviour comes from). See `integrations/salesforce/__init__.py` for the API.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import parse_qs, unquote

from integrations.emulator_kit import EmulatorServer
from integrations.salesforce.store import (
    DEFAULT_CONFIG,
    RECORD_OBJECTS,
    Refused,
    SalesforceStore,
    sf_error,
)
from integrations.sandbox.http import CONTROL_ROUTES, Reply, Route, SandboxRequestHandler
from integrations.sandbox.store import Fault

_API = r"/services/data/v(?P<version>\d+\.\d)"
_ROUTES: list[Route] = [
    (re.compile(r"/services/oauth2/token"), {"POST": "token_post"}),
    (re.compile(_API + r"/sobjects/(?P<sobject>\w+)/describe"), {"GET": "describe_get"}),
    (
        re.compile(_API + r"/sobjects/(?P<sobject>\w+)/(?P<field>\w+)/(?P<value>[^/]+)"),
        {"GET": "by_ref_get", "PATCH": "by_ref_patch"},
    ),
    (
        re.compile(_API + r"/sobjects/(?P<sobject>\w+)/(?P<record_id>[A-Za-z0-9]+)"),
        {"GET": "row_get", "PATCH": "row_patch", "DELETE": "row_delete"},
    ),
    (re.compile(_API + r"/sobjects/(?P<sobject>\w+)"), {"POST": "sobject_post"}),
    (re.compile(_API + r"/query"), {"GET": "query_get"}),
    (re.compile(_API + r"/query/(?P<locator>[\w-]+)"), {"GET": "query_more_get"}),
    (re.compile(r"/_sandbox/config"), {"GET": "config_get", "POST": "config_post"}),
    (re.compile(r"/_sandbox/seed"), {"POST": "seed_post"}),
    (re.compile(r"/_sandbox/expire_tokens"), {"POST": "expire_tokens_post"}),
    *CONTROL_ROUTES,
]
# [QUERY] in store.py: batchSize is 200 to 2,000, default 2,000.
_BATCH_MIN, _BATCH_MAX = 200, 2000


def _errors(exc: Refused) -> Reply:
    return Reply(exc.status, exc.body, dict(exc.headers))


class SalesforceRequestHandler(SandboxRequestHandler):
    """Salesforce's REST paths plus the sandbox's controls."""

    routes = _ROUTES
    server_version = "SalesforceEmulator/1"

    @property
    def org(self) -> SalesforceStore:
        store = self.server.store
        assert isinstance(store, SalesforceStore)
        return store

    # -- plumbing ----------------------------------------------------------------

    def _api(self, call: Callable[[], tuple[int, Any]], *, auth: bool = True) -> Reply:
        """Runs `call` for an authenticated request; Salesforce's error shapes out."""
        if auth and not self.org.token_valid(self.headers.get("Authorization")):
            # [ERRORS] in store.py: an expired or invalid session answers 401.
            return _errors(sf_error(401, "INVALID_SESSION_ID", "Session expired or invalid"))
        try:
            status, body = call()
        except Refused as exc:
            reply = _errors(exc)
        else:
            reply = Reply(status, body)
        if auth:
            reply.headers["Sforce-Limit-Info"] = self.org.limit_info()
        return reply

    def _body(self) -> dict[str, Any]:
        try:
            body = json.loads(self.raw_body or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise sf_error(400, "JSON_PARSER_ERROR", f"Unexpected character: {exc}") from None
        if not isinstance(body, dict):
            raise sf_error(400, "JSON_PARSER_ERROR", "Cannot deserialize instance of SObject")
        return body

    def _auto_assign(self) -> bool:
        """[ASSIGN] in store.py: TRUE unless the header says FALSE (any case)."""
        return (self.headers.get("Sforce-Auto-Assign") or "TRUE").strip().upper() != "FALSE"

    def _allow_save(self) -> bool:
        header = self.headers.get("Sforce-Duplicate-Rule-Header") or ""
        options = dict(
            part.strip().partition("=")[::2] for part in header.split(";") if "=" in part
        )
        return options.get("allowSave", "").strip().lower() == "true"

    def _batch_size(self) -> int:
        header = self.headers.get("Sforce-Query-Options") or ""
        match = re.search(r"batchSize=(\d+)", header)
        size = int(match.group(1)) if match else _BATCH_MAX
        return max(_BATCH_MIN, min(_BATCH_MAX, size))

    def fault_reply_before_commit(self, fault: Fault) -> Reply | None:
        """The sandbox's faults in Salesforce's words ([ERRORS] in store.py)."""
        limit = {"Sforce-Limit-Info": "api-usage=15000/15000"}
        answers = {
            "fail_before_commit": sf_error(
                500, "UNKNOWN_EXCEPTION", "An unexpected error occurred (injected before commit)"
            ),
            # Salesforce's rate limit is a 403, not a 429, and carries no Retry-After.
            "http_429": Refused(
                403,
                [
                    {
                        "message": "TotalRequests Limit exceeded.",
                        "errorCode": "REQUEST_LIMIT_EXCEEDED",
                    }
                ],
                limit,
            ),
            "http_503": Refused(
                503,
                [{"message": "Server unavailable (injected)", "errorCode": "SERVER_UNAVAILABLE"}],
                {"Retry-After": str(max(0, math.ceil(fault.seconds)))},
            ),
            # A validation rule's refusal is Salesforce's everyday 400.
            "http_400": sf_error(
                400, "FIELD_CUSTOM_VALIDATION_EXCEPTION", "injected validation error", []
            ),
        }
        refusal = answers.get(fault.mode)
        return _errors(refusal) if refusal is not None else None

    def fault_reply_after_commit(self, fault: Fault) -> Reply:
        return _errors(
            sf_error(
                500, "UNKNOWN_EXCEPTION", "An unexpected error occurred (injected after commit)"
            )
        )

    def _write_action(self, sobject: str) -> str:
        return "create_task" if sobject == "Task" else "create_record"

    def _faulted_api(self, sobject: str, call: Callable[[], tuple[int, Any]]) -> Reply:
        """A write that may create: counted, and under the sandbox's fault queue.
        Faults apply to authenticated, well-formed calls only."""
        if not self.org.token_valid(self.headers.get("Authorization")):
            return self._api(call)
        action = self._write_action(sobject)
        self.store.count_call(action)
        return self._faulted(action, lambda: self._api(call))

    # -- OAuth -------------------------------------------------------------------

    def token_post(self) -> Reply:
        form = {k: v[-1] for k, v in parse_qs(self.raw_body.decode("latin-1")).items()}
        self.store.count_call("token")
        host = self.headers.get("Host") or f"{self.server.server_name}:{self.server.server_port}"
        return self._api(lambda: (200, self.org.issue_token(form, f"http://{host}")), auth=False)

    # -- sObjects ------------------------------------------------------------------

    def describe_get(self, version: str, sobject: str) -> Reply:
        self.store.count_call("describe")
        return self._api(lambda: self.org.describe(sobject))

    def by_ref_get(self, version: str, sobject: str, field: str, value: str) -> Reply:
        self.store.count_call("lookup_task" if sobject == "Task" else "lookup_record")
        return self._api(
            lambda: self.org.get_by_ref(sobject, field, unquote(value), version=version)
        )

    def by_ref_patch(self, version: str, sobject: str, field: str, value: str) -> Reply:
        def call() -> tuple[int, Any]:
            return self.org.upsert(
                sobject,
                field,
                unquote(value),
                self._body(),
                version=version,
                auto_assign=self._auto_assign(),
                allow_save=self._allow_save(),
            )

        return self._faulted_api(sobject, call)

    def sobject_post(self, version: str, sobject: str) -> Reply:
        def call() -> tuple[int, Any]:
            return self.org.create(
                sobject,
                self._body(),
                version=version,
                auto_assign=self._auto_assign(),
                allow_save=self._allow_save(),
            )

        return self._faulted_api(sobject, call)

    def row_get(self, version: str, sobject: str, record_id: str) -> Reply:
        return self._api(lambda: self.org.get(sobject, record_id, version=version))

    def row_patch(self, version: str, sobject: str, record_id: str) -> Reply:
        self.store.count_call("update_record")
        return self._api(
            lambda: self.org.update(
                sobject, record_id, self._body(), auto_assign=self._auto_assign()
            )
        )

    def row_delete(self, version: str, sobject: str, record_id: str) -> Reply:
        self.store.count_call("delete_record")
        return self._api(lambda: self.org.delete(sobject, record_id))

    def query_get(self, version: str) -> Reply:
        self.store.count_call("list_records")
        soql = self._param("q") or ""
        return self._api(
            lambda: self.org.query(soql, version=version, batch_size=self._batch_size())
        )

    def query_more_get(self, version: str, locator: str) -> Reply:
        self.store.count_call("list_records")
        return self._api(
            lambda: self.org.query_more(locator, version=version, batch_size=self._batch_size())
        )

    # -- controls (tests and drills) -------------------------------------------------

    def config_get(self) -> Reply:
        return Reply(200, dict(self.org.config))

    def config_post(self) -> Reply:
        return self._api(lambda: (200, self.org.set_config(self._body())), auth=False)

    def seed_post(self) -> Reply:
        def call() -> tuple[int, Any]:
            body = self._body()
            sobject = str(body.get("sobject") or "Lead")
            rows = body.get("records")
            if rows is None:
                count = int(body.get("count") or 0)
                prefix = str(body.get("prefix") or "seed-")
                field = str(self.org.config["reference_field"])
                required = {"LastName": "Seeded", "Company": "Seeded"} if sobject == "Lead" else {}
                if sobject in RECORD_OBJECTS and sobject != "Lead":
                    required = {"LastName": "Seeded"}
                rows = [{**required, field: f"{prefix}{i}"} for i in range(count)]
            return 200, {"created": self.org.seed_rows(sobject, list(rows))}

        return self._api(call, auth=False)

    def expire_tokens_post(self) -> Reply:
        return Reply(200, {"expired": self.org.expire_tokens()})


class SalesforceEmulator(EmulatorServer):
    """`with SalesforceEmulator() as sf: sf.http_url` (a free port on loopback)."""

    vendor: ClassVar[str] = "salesforce"
    handler_class = SalesforceRequestHandler
    store_class = SalesforceStore

    def adapter_env(self) -> dict[str, str]:
        """The SALESFORCE_* variables that point the adapter at this emulator as it
        starts (after a reset): its URL and its default client credentials."""
        return {
            "SALESFORCE_INSTANCE_URL": self.http_url,
            "SALESFORCE_CLIENT_ID": str(DEFAULT_CONFIG["client_id"]),
            "SALESFORCE_CLIENT_SECRET": str(DEFAULT_CONFIG["client_secret"]),
        }
