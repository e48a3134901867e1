"""The vendors' own descriptions of their APIs as the judge of what crosses the wire.

A test records an adapter's traffic with its emulator (`recording`: a request gate,
`integrations.http.request_gate`, that keeps every answer and, with it, the request
it answers), then asks the vendor's `Contract` for its `problems`: each request
checked against its operation, each answer against the shape for its status.
Resend's is its OpenAPI document (lab/specs/resend/, read by openapi-core); HubSpot's
are the models of its Apache-2.0 Python client (tests/support/hubspot_shapes.py).
`assert_kept` fails on any problem that no excuse named by the test covers.

What a document is known to get wrong, or what an emulator answers on purpose though
the document lacks it, is listed once, in `EXCUSES`, with the reason and a source. A
test names the excuses it needs; an excuse named that excuses nothing fails the test
too, so one cannot outlive its cause.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
from jsonschema import Draft202012Validator
from openapi_core import OpenAPI
from openapi_core.datatypes import RequestParameters
from werkzeug.datastructures import Headers, ImmutableMultiDict

from integrations.http import request_gate
from tests.support.hubspot_shapes import route, schema

SPECS_DIR = Path(__file__).resolve().parents[2] / "lab" / "specs"


# -- recording -----------------------------------------------------------------------


class TrafficRecorder:
    """A request gate (integrations.http.RequestGate) that lets every request through
    and keeps every answer; `answer.request` is the request as it was sent."""

    def __init__(self) -> None:
        self.answers: list[httpx.Response] = []

    def before(self, method: str, url: str) -> None:
        return None

    def after(self, response: httpx.Response) -> None:
        self.answers.append(response)


@contextmanager
def recording() -> Iterator[list[httpx.Response]]:
    """Every answer to a request an adapter sends meanwhile, in this context (thread)."""
    recorder = TrafficRecorder()
    token = request_gate.set(recorder)
    try:
        yield recorder.answers
    finally:
        request_gate.reset(token)


def operations(traffic: Iterable[httpx.Response]) -> set[str]:
    """Each exchange as `METHOD /path STATUS`, numeric ids as `{id}`: what a test covered."""
    return {
        f"{a.request.method} {re.sub(r'/[0-9]+(?=/|$)', '/{id}', a.request.url.path)} "
        f"{a.status_code}"
        for a in traffic
    }


# -- the documents ---------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    """One vendored OpenAPI document and the request paths (under `prefix`) it describes."""

    file: str
    prefix: str

    def describes(self, path: str) -> bool:
        return self.prefix == "/" or path == self.prefix or path.startswith(self.prefix + "/")


RESEND_DOCUMENTS = (Document("resend/resend.json", "/"),)


@cache
def _openapi(file: str) -> tuple[OpenAPI, str]:
    """The document, and its server's URL (the emulator answers in the server's place)."""
    document = json.loads((SPECS_DIR / file).read_text())
    return OpenAPI.from_dict(document), document["servers"][0]["url"].rstrip("/")


# -- excuses ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Excuse:
    """A problem the suite accepts, matched by any of `patterns` (fnmatch) against a
    problem's text: "METHOD /path request: ..." or "METHOD /path answer STATUS: ..."."""

    name: str
    patterns: tuple[str, ...]
    reason: str
    source: str

    def covers(self, problem: str) -> bool:
        return any(fnmatchcase(problem, pattern) for pattern in self.patterns)


EXCUSES = {
    excuse.name: excuse
    for excuse in (
        Excuse(
            "hubspot-rate-limit-body",
            ("* /crm/* answer 429: body: 'category' is a required property",),
            "HubSpot's 429 answers carry `errorType` and `policyName`, not the `category` its "
            'shared Error model requires: "the 429 response will have the '
            'following format: {"status": "error", "message": "You have reached your daily '
            'limit.", "errorType": "RATE_LIMIT", "correlationId": ..., "policyName": '
            '"DAILY", "requestId": ...}".',
            "https://developers.hubspot.com/docs/api/usage-details (quoted in "
            "community.hubspot.com/t5/APIs-Integrations/Hubspot-User-experience/m-p/511719)",
        ),
        Excuse(
            "resend-errors-undocumented",
            ("* answer [45]??: Unknown response http status: [45]??",),
            "Resend's document lists only each operation's 200; its errors, one shape "
            '{"statusCode", "message", "name"} for every status, are on the errors page '
            "and are not in the document to check against.",
            "https://resend.com/docs/api-reference/errors",
        ),
        Excuse(
            "resend-email-bodies-null",
            (
                "GET /emails/* answer 200: body $.html: None is not of type 'string'",
                "GET /emails/* answer 200: body $.text: None is not of type 'string'",
            ),
            "Resend's document types a retrieved email's `html` and `text` as string; Resend "
            "answers null for the one not sent, as its own SDK types them "
            "(`html: string | null; text: string | null`).",
            "resend/resend-node, src/emails/interfaces/get-email-options.interface.ts",
        ),
    )
}


# -- validation ------------------------------------------------------------------------


class Contract:
    """One vendor's documents, and what its traffic breaks of them."""

    def __init__(self, documents: tuple[Document, ...]) -> None:
        self.documents = documents

    def problems(self, traffic: Iterable[httpx.Response], *, requests: bool = True) -> list[str]:
        """Every problem of every exchange; `requests=False`: of the answers only (a test's
        own request that breaks the document on purpose, such as one without a key)."""
        found: list[str] = []
        for answer in traffic:
            found += self._exchange_problems(answer, requests=requests)
        return found

    def assert_kept(
        self,
        traffic: list[httpx.Response],
        *,
        excused: Iterable[str] = (),
        requests: bool = True,
    ) -> None:
        """Fails on a problem no excuse in `excused` covers, on an excuse that covers
        nothing, and on no traffic at all (a check of nothing proves nothing)."""
        assert traffic, "no traffic was recorded: nothing was checked"
        excuses = [EXCUSES[name] for name in excused]
        found = self.problems(traffic, requests=requests)
        unexcused = [p for p in found if not any(e.covers(p) for e in excuses)]
        idle = [e.name for e in excuses if not any(e.covers(p) for p in found)]
        assert not unexcused, "traffic that breaks the vendor's document:\n" + "\n".join(unexcused)
        assert not idle, f"excuses that excused nothing (remove them): {idle}"

    def _exchange_problems(self, answer: httpx.Response, *, requests: bool) -> list[str]:
        sent = answer.request
        path = sent.url.path
        document = next((d for d in self.documents if d.describes(path)), None)
        where = f"{sent.method} {path}"
        if document is None:
            return [f"{where} request: no vendored document describes this path"]
        spec, server = _openapi(document.file)
        request = _SpecRequest(sent, host_url=server, path=path)
        found = []
        with warnings.catch_warnings():
            # openapi-core checks apiKey and http schemes only and skips others with a
            # warning; the emulators check the credential themselves.
            warnings.filterwarnings("ignore", "Unsupported scheme type", UserWarning)
            if requests:
                found += [
                    f"{where} request: {d}"
                    for e in spec.iter_request_errors(request)
                    for d in _details(e)
                ]
            found += [
                f"{where} answer {answer.status_code}: {d}"
                for e in spec.iter_response_errors(request, _SpecResponse(answer))
                for d in _details(e)
            ]
        return found


def _details(error: Exception) -> list[str]:
    """One line per thing wrong: a body's schema errors each with its JSON path."""
    cause = error.__cause__
    schema_errors = getattr(cause, "schema_errors", None)
    if schema_errors:
        return [
            f"body: {e.message}" if e.json_path == "$" else f"body {e.json_path}: {e.message}"
            for e in schema_errors
        ]
    return [f"{error}: {cause}" if cause is not None else str(error)]


class _SpecRequest:
    """An httpx request as openapi-core reads one (openapi_core.protocols.Request),
    addressed to the document's server."""

    def __init__(self, request: httpx.Request, *, host_url: str, path: str) -> None:
        self.host_url = host_url
        self.path = path
        self.method = request.method.lower()
        self.body: bytes | None = request.content or None
        self.content_type = request.headers.get("Content-Type", "")
        query = parse_qs(urlsplit(str(request.url)).query, keep_blank_values=True)
        self.parameters = RequestParameters(
            query=ImmutableMultiDict(query),
            header=Headers(dict(request.headers)),
            cookie=ImmutableMultiDict(),
        )


class _SpecResponse:
    """An httpx answer as openapi-core reads one (openapi_core.protocols.Response)."""

    def __init__(self, response: httpx.Response) -> None:
        self.status_code = response.status_code
        self.content_type = response.headers.get("Content-Type", "")
        self.headers = Headers(dict(response.headers))
        self.data: bytes | None = response.content


class HubSpotContract(Contract):
    """HubSpot's operations (hubspot_shapes.ROUTES), each body judged by JSON Schema
    against the client's model for it; every error status against its Error model."""

    def __init__(self) -> None:
        super().__init__(())

    def _exchange_problems(self, answer: httpx.Response, *, requests: bool) -> list[str]:
        sent = answer.request
        where = f"{sent.method} {sent.url.path}"
        found = route(sent.method, sent.url.path)
        if found is None:
            return [f"{where} request: no HubSpot model describes this operation"]
        operation, module = found
        problems = []
        if requests:
            problems += [
                f"{where} request: {d}"
                for d in _body_problems(module, operation.request, sent.content)
            ]
        status = answer.status_code
        if status >= 400:
            model: str | None = "Error"
        elif status in operation.answers:
            model = operation.answers[status]
        else:
            return [*problems, f"{where} answer {status}: no model for this status"]
        return problems + [
            f"{where} answer {status}: {d}" for d in _body_problems(module, model, answer.content)
        ]


def _body_problems(module: str, model: str | None, content: bytes) -> list[str]:
    if model is None:
        return ["body: none expected"] if content else []
    try:
        body = json.loads(content)
    except ValueError:
        return ["body: not JSON"]
    errors = Draft202012Validator(schema(module, model)).iter_errors(body)
    return [
        f"body: {e.message}" if e.json_path == "$" else f"body {e.json_path}: {e.message}"
        for e in sorted(errors, key=lambda e: e.json_path)
    ]


def hubspot_contract() -> Contract:
    return HubSpotContract()


def resend_contract() -> Contract:
    return Contract(RESEND_DOCUMENTS)
