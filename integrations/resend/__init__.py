"""Resend, the transactional email API: its adapter and a local emulator.

The adapter (`adapter.py`, `ResendSender`) sends the confirmation email with
`POST /emails` and `Idempotency-Key: <operation key>`; its capabilities are
`idempotency_keys=True` with `key_retention` 24 hours (Resend's documented
window). Configuration: `adapter_from_env()` reads `RESEND_API_KEY` (required,
sent as `Authorization: Bearer`), `RESEND_BASE_URL` (default
https://api.resend.com), `RESEND_FROM` (default: Django's `DEFAULT_FROM_EMAIL`,
itself read from the environment variable of that name) and
`RESEND_KEY_RETENTION_SECONDS` (optional; can only shorten the 24 hours).

Running the emulator
====================

In-process (tests)::

    from integrations.resend.emulator import ResendEmulator

    with ResendEmulator() as resend:            # port 0: a free port
        httpx.post(f"{resend.http_url}/emails", json={...},
                   headers={"Authorization": "Bearer re_test", "Idempotency-Key": "k"})

A real HTTP/1.1 server on loopback; its state lives in memory, never in the
app's database.

Resend API (what the adapter calls)
===================================

Every answer carries `ratelimit-limit`, `ratelimit-remaining`, `ratelimit-reset`
(https://resend.com/docs/api-reference/rate-limit). Errors are Resend's shape
`{"statusCode", "message", "name"}` (https://resend.com/docs/api-reference/errors).

Authentication: `Authorization: Bearer re_...`. None: 401 `missing_api_key`; a
key that does not start with `re_`, or differs from the configured `api_key`:
403 `invalid_api_key`. A key with `api_key_permission` `sending_access` may send
and nothing else: 401 `restricted_api_key` on the other paths.

``POST /emails`` ``{"from", "to": str | [str] (1-50), "subject", "text" | "html",
"headers"?: {...}}``
    200 ``{"id": "<uuid>"}``: the email is sent (stored, see the controls).
    Missing fields: 422 `missing_required_field`; a malformed address: 422
    `validation_error`. When `domains` are configured, a `from` domain that is
    not listed as verified: 403 `validation_error`.
    ``Idempotency-Key`` (https://resend.com/docs/dashboard/emails/idempotency-keys):
    outside 1-256 characters: 400 `invalid_idempotency_key`. A key seen within
    `idempotency_window_seconds` (default 86400) with the same payload (the
    request body, compared as canonical JSON) answers the first answer again
    and sends nothing; with another payload 409 `invalid_idempotent_request`;
    while the first request with it is still in progress (e.g. held by a `slow`
    fault) 409 `concurrent_idempotent_requests`. Older keys are forgotten: the
    same request then sends a second email, as Resend would after 24 hours. A
    request refused before sending (a 429 or 500 fault) leaves the key unbound.

``GET /emails/{id}``
    200 with the email (`object`, `id`, `from`, `to`, `subject`, `text`, `html`,
    `headers`, `created_at`, `last_event`), 404 `not_found`.

``GET /domains``
    200 ``{"object": "list", "data": [{"id", "name", "status", "created_at",
    "region"}]}`` from the configured `domains`.

Controls (tests and drills)
===========================

The sandbox's `/_sandbox/reset`, `/_sandbox/faults` (action `send_email`; the
before-commit modes answer in Resend's words: `http_429` is 429
`rate_limit_exceeded` with `retry-after`, `fail_before_commit` and
`http_500_after_commit` are 500 `internal_server_error`, `http_400` is 422
`validation_error`), `/_sandbox/chaos` and `/_sandbox/stats`: records and tasks
0, `messages` the emails sent, `messages_by_recipient`, and
`messages_by_message_id` keyed by the idempotency key (the email id when sent
without one).

``GET|POST /_sandbox/config`` ``{"idempotency_window_seconds", "api_key",
"api_key_permission", "domains"}``: read or change the settings above.

``GET /_sandbox/messages``: ``{"results": [emails, oldest first]}``, each with
the `idempotency_key` it was sent with.

Simplified: no batch sending, attachments, scheduling, webhooks or per-second
rate limiting of its own (429s come from faults); the payload comparison is on
the JSON body as sent.
"""
