"""The hooks in the public OpenAPI schema (/api/schema/), written from the presets.

drf-spectacular documents DRF views; the hooks are plain Django views (they read the
raw body), so their paths are appended to the generated schema (`APPEND_PATHS`, set
on the public schema's view in config/urls.py). Everything here is derived from
`PRESETS`, so a new profile, header or tolerance shows without editing this file:
each profile's path, its signature header and how it is computed, and the answers
(docs/senders.md).
"""

from __future__ import annotations

from typing import Any

from idempotency_core.intake.hooks import DISABLED_RETRY_AFTER_SECONDS, UNVERIFIED
from idempotency_core.intake.senders.profiles import PRESETS, Profile
from idempotency_core.intake.senders.verifying import SignatureRecipe

TAG = "hooks"


def hook_paths() -> dict[str, Any]:
    """OpenAPI path items for the two hook routes and the html profile's form.js."""
    signed = [p for p in PRESETS.values() if p.signs]
    by_token = [p for p in PRESETS.values() if not p.signs]
    return {
        "/hooks/{source}/": {
            "post": _operation(
                operation_id="hook_signed",
                summary="A form provider's delivery, signed",
                description=(
                    "For sources whose profile signs its deliveries: "
                    + ", ".join(f"`{p.name}`" for p in signed)
                    + ". The signature is verified over the raw body exactly as the "
                    "provider defines it (headers below); nothing else is read before it "
                    "verifies.\n\n" + _profiles_table(signed)
                ),
                parameters=[_source_parameter(), *_signature_headers(signed)],
            )
        },
        "/hooks/{source}/t/{token}/": {
            "post": _operation(
                operation_id="hook_token",
                summary="A form provider's delivery, authenticated by the token in its path",
                description=(
                    "For sources whose sender cannot sign: "
                    + ", ".join(f"`{p.name}`" for p in by_token)
                    + ". The path, token included, is printed once by `create_source`; "
                    "a posting to it needs nothing else. Keep the whole path secret "
                    "(the `html` profile's is public by nature: it is in the page).\n\n"
                    + _profiles_table(by_token)
                ),
                parameters=[
                    _source_parameter(),
                    {
                        "name": "token",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                        "description": "The hook's token, as `create_source` printed it.",
                    },
                    {
                        "name": "Accept",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                        "description": "`html` profile: a browser's post (one that accepts "
                        "`text/html`) is answered 303 to the source's thank-you page.",
                    },
                ],
                browser=True,
            )
        },
        "/hooks/{source}/t/{token}/form.js": {
            "get": {
                "operationId": "hook_form_script",
                "summary": "The html profile's script",
                "description": "Adds a `submission_id` kept per browser tab (one event for "
                "a double click or a re-post) and the hidden honeypot field `website`. "
                "Served only at an `html` source's own hook path; any other path gets "
                "the same 404.",
                "tags": [TAG],
                "security": [],
                "parameters": [
                    _source_parameter(),
                    {"name": "token", "in": "path", "required": True, "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {
                        "description": "The script.",
                        "content": {"text/javascript": {"schema": {"type": "string"}}},
                    },
                    "404": {
                        "description": "Not an html source's hook.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                },
            }
        },
    }


def hook_components() -> dict[str, Any]:
    """The answers' bodies, named for the hooks (the JSON API's own are its serializers')."""
    return {
        "schemas": {
            "HookAccepted": {
                "type": "object",
                "properties": {"event_id": {"type": "string", "format": "uuid"}},
                "required": ["event_id"],
            },
            "HookNeedsReview": {
                "type": "object",
                "properties": {
                    "event_id": {"type": "string", "format": "uuid"},
                    "status": {"type": "string", "enum": ["needs_review"]},
                },
                "required": ["event_id", "status"],
            },
            "HookError": {
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "detail": {"type": "string"},
                    "errors": {"type": "object", "additionalProperties": True},
                },
                "required": ["code", "detail"],
            },
        }
    }


def _operation(
    *,
    operation_id: str,
    summary: str,
    description: str,
    parameters: list[dict[str, Any]],
    browser: bool = False,
) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "description": description,
        "tags": [TAG],
        # No API key: the signature or the token is the credential.
        "security": [],
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "description": "The provider's own body, as it sends it (at most "
            "ONEFOLD_MAX_BODY_BYTES, default 64 KiB), read as its Content-Type says (one "
            "of these three; any other as the source's profile expects) and mapped by the "
            "source's profile.",
            "content": {
                media: {"schema": {"type": "object", "additionalProperties": True}}
                for media in (
                    "application/json",
                    "application/x-www-form-urlencoded",
                    "multipart/form-data",
                )
            },
        },
        "responses": _responses(browser=browser),
    }


def _responses(*, browser: bool) -> dict[str, Any]:
    retry_after = {
        "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}
    }
    responses: dict[str, Any] = {
        "200": _json(
            "HookAccepted",
            "The first delivery and every repeat: one event (some senders count only "
            '200 as success). A honeypot-filled `html` post is answered `{"status": '
            '"ok"}` and kept as nothing.',
        ),
        "202": _json(
            "HookNeedsReview",
            "Verified and parsed, but it does not map to a valid submission: kept with "
            "its raw body, a person fixes its map in the console.",
        ),
        "400": _json("HookError", "The body does not parse (or is over a parsing limit)."),
        "401": _json(
            "HookError",
            "Not verified: a wrong or missing signature or token, a stale signed "
            "timestamp, or no such hook. Always exactly "
            f"`{_compact(UNVERIFIED)}`, so that no one learns which sources exist; the "
            "reason is on the console's source page.",
        ),
        "413": _json("HookError", "The body is over ONEFOLD_MAX_BODY_BYTES."),
        "422": _json(
            "HookError", "The provider's submission id was delivered before with other content."
        ),
        "429": {
            **_json(
                "HookError",
                "Too many requests from this client address (checked first), or over the "
                "source's rate (checked after verification).",
            ),
            "headers": retry_after,
        },
        "503": {
            **_json(
                "HookError",
                "The source is disabled (told only after the credential verified): keep "
                f"the submission and retry (Retry-After {DISABLED_RETRY_AFTER_SECONDS}).",
            ),
            "headers": retry_after,
        },
    }
    if browser:
        responses["303"] = {
            "description": "`html` profile, a browser's post: to the source's thank-you page.",
            "headers": {"Location": {"schema": {"type": "string", "format": "uri"}}},
        }
    return dict(sorted(responses.items()))


def _json(component: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{component}"}}},
    }


def _compact(body: dict[str, str]) -> str:
    return "{" + ", ".join(f'"{k}": "{v}"' for k, v in body.items()) + "}"


def _source_parameter() -> dict[str, Any]:
    return {
        "name": "source",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": "The source's name.",
    }


def _signature_headers(profiles: list[Profile]) -> list[dict[str, Any]]:
    """One header parameter per header any signing profile reads, naming who sends it."""
    headers: dict[str, list[str]] = {}
    for profile in profiles:
        recipe = profile.signature
        assert recipe is not None
        names = [recipe.header, recipe.timestamp_header]
        names += [p.removeprefix("header:") for p in profile.id_places if _is_header(p)]
        for name in filter(None, names):
            headers.setdefault(name, []).append(profile.name)
    return [
        {
            "name": name,
            "in": "header",
            "required": False,
            "schema": {"type": "string"},
            "description": "Sent by " + ", ".join(f"`{p}`" for p in senders) + ".",
        }
        for name, senders in headers.items()
    ]


def _is_header(place: Any) -> bool:
    return isinstance(place, str) and place.startswith("header:")


def _profiles_table(profiles: list[Profile]) -> str:
    rows = [
        "| profile | sender | how it proves itself | submission id |",
        "| --- | --- | --- | --- |",
    ]
    for profile in profiles:
        proof = _signature(profile.signature) if profile.signature else "the token in the path"
        ids = ", ".join(_id_place(p) for p in profile.id_places)
        rows.append(f"| `{profile.name}` | {profile.label} | {proof} | {ids or 'none'} |")
    rows.append("")
    rows.append(
        "The event key is the provider's own submission id, namespaced by profile and "
        "form; a delivery without one is keyed by a fingerprint of its content."
    )
    return "\n".join(rows)


def _id_place(place: Any) -> str:
    if _is_header(place):
        return f"the `{place.removeprefix('header:')}` header"
    return f"`{place}`" if isinstance(place, str) else "the contact id and conversion time"


def _signature(recipe: SignatureRecipe) -> str:
    message = (
        recipe.layout.replace("{body}", "<raw body>")
        .replace("{timestamp}", "<t>" if recipe.header_format == "t_v1" else "<timestamp>")
        .replace("{method}", "<METHOD>")
        .replace("{url}", "<URL>")
    )
    digest = f'{recipe.encoding} HMAC-SHA256(secret, "{message}")'
    if recipe.header_format == "t_v1":
        written = f"`{recipe.header}: t=<unix seconds>,v1=<{digest}>`"
    else:
        written = f"`{recipe.header}: {recipe.prefix}<{digest}>`"
        if recipe.timestamp_header:
            unit = "milliseconds" if recipe.timestamp_unit == "ms" else "seconds"
            written += f" with `{recipe.timestamp_header}: <unix {unit}>`"
    if recipe.signs_timestamp and recipe.tolerance_seconds is not None:
        written += f", within {recipe.tolerance_seconds} s"
    return written
