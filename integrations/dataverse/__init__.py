"""Microsoft Dataverse (Dynamics 365 Sales): its CRM adapter and a local emulator.

The adapter (`adapter.py`, `DataverseCrm`) makes the enquiry a lead and the
task a task regarding it, each created once under a GUID derived from the
operation key (`PATCH .../leads(<guid>)` with `If-None-Match: *`; a repeat
answers 412 and is adopted). Capabilities: `unique_external_ref`, `lookup` and
`merge`; no idempotency key. `adapter_from_env()` reads `DATAVERSE_URL` (the org
URL), `DATAVERSE_CLIENT_ID`, `DATAVERSE_CLIENT_SECRET`, `DATAVERSE_TOKEN_URL`
(all required; token by client credentials, scope `<DATAVERSE_URL>/.default`),
`DATAVERSE_REF_COLUMN` (default `onefold_ref`) and `DATAVERSE_TASK_REF_COLUMN`
(default the same name; empty: tasks carry no reference column).

Running the emulator
====================

In-process (tests)::

    from integrations.dataverse.emulator import DataverseEmulator

    with DataverseEmulator() as dataverse:      # port 0: a free port
        dataverse.http_url      # the org URL (DATAVERSE_URL)
        dataverse.token_url     # {http_url}/emulator-tenant/oauth2/v2.0/token

A real HTTP/1.1 server on loopback; its state lives in memory, never in the
app's database.

Token endpoint (Microsoft Entra ID)
===================================

``POST /{tenant}/oauth2/v2.0/token`` (form: `grant_type=client_credentials`,
`client_id`, `client_secret`, `scope` ending in `/.default`;
https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow)
    200 ``{"token_type": "Bearer", "expires_in", "ext_expires_in",
    "access_token"}``; a wrong secret (when `client_secret` is configured; else any
    non-empty one is taken) 401 ``{"error": "invalid_client", ...}``; another
    scope 400 `invalid_scope`; another grant 400 `unsupported_grant_type`.

Web API (``/api/data/v9.2``; every call needs ``Authorization: Bearer <token>``)
==============================================================================

A missing, expired or revoked token: 401 with `WWW-Authenticate`. Errors are
Dataverse's ``{"error": {"code", "message"}}``
(https://learn.microsoft.com/power-apps/developer/data-platform/webapi/compose-http-requests-handle-errors).
Date-times are UTC whole seconds with a Z.

``PATCH /leads(<guid>)`` (lead columns `subject`, `firstname`, `lastname`,
`emailaddress1`, `telephone1`, `description`, `companyname` and the reference
column; another property is 400 "Invalid property")
    204 with `OData-EntityId`. `If-None-Match: *` only creates: an existing GUID
    is 412 "A record with matching key values already exists."; `If-Match: *`
    only updates: a missing lead is 404 "lead With Id = ... Does Not Exist";
    neither: an upsert (perform-conditional-operations-using-web-api). While the
    alternate key is Active, a reference value held by another unmerged lead is
    412 "A record that has the attribute values ... already exists. The entity
    key ... requires ..." (code 0x80060892); not Active, it is not enforced.

``GET /leads(<guid>)``, ``GET /leads(<column>='<value>')`` (the alternate key;
400 while it is not Active; the value URL-encoded, quotes doubled), ``DELETE
/leads(<guid>)`` (its tasks too), with ``$select``
    The lead: its columns, `leadid`, the reference column, `fullname`,
    `createdon`, `modifiedon`, `statecode`, `merged`, `_masterid_value`,
    `@odata.etag`.

``GET /leads?$filter=...`` with ``Prefer: odata.maxpagesize=N`` (default and
maximum 5000)
    ``{"value": [...], "@odata.nextLink"?}`` in (createdon, leadid) order;
    `$filter` takes comparisons (eq ne ge gt le lt) joined by `and` on any
    column, with date-time, 'string', true/false and null literals; the
    next link carries a `$skiptoken`. `$orderby` is accepted and not applied.

``PATCH /tasks(<guid>)`` (`subject`, `description`, `scheduledend`,
`prioritycode`, `regardingobjectid_lead_task@odata.bind: "/leads(<guid>)"`,
`ownerid@odata.bind`, the reference column), ``GET /tasks(<guid>)``, ``GET
/tasks?$filter=_regardingobjectid_value eq <guid>``
    As for leads (404 when the bound lead does not exist).

``POST /Merge`` ``{"Target": {"@odata.type": "Microsoft.Dynamics.CRM.lead",
"leadid"}, "Subordinate": {...}, "UpdateContent"?: {...},
"PerformParentingChecks": bool}``
    204: the subordinate is marked `merged`, its `_masterid_value` set to the
    target and `statecode` 2; its tasks now regard the target (the Lead_Tasks
    relationship cascades Merge). Merging a merged lead is 400.

``GET /EntityDefinitions(LogicalName='lead')/Keys``
    ``{"value": [{"LogicalName": "<column>_key", "KeyAttributes": [<column>],
    "EntityKeyIndexStatus": <alternate_key_status>, ...}]}``; for `task`, none.

``GET /WhoAmI``: ``{"UserId"}``.

Controls (tests and drills)
===========================

The sandbox's `/_sandbox/reset`, `/_sandbox/faults` and `/_sandbox/chaos`
(actions `create_record`: a lead created with `If-None-Match: *`, and
`create_task`: likewise a task; `http_429` answers 429 with `Retry-After` and
code 0x80072322, "Number of requests exceeded the limit of 6000 over time window
of 300 seconds." (https://learn.microsoft.com/power-apps/developer/data-platform/api-limits);
500s are code 0x80040216), and `/_sandbox/stats`: `records` the unmerged leads,
`tasks` the tasks regarding them, each counted by reference value in
`records_by_external_ref` / `tasks_by_external_ref`; `messages` 0; `calls`
counts `token` requests too.

``GET|POST /_sandbox/config`` ``{"alternate_key_status": "Active" | "Pending" |
"InProgress" | "Failed", "reference_column", "client_secret",
"token_lifetime_seconds", "revoke_tokens": true}``: `revoke_tokens` forgets every
issued token (the next call answers 401).

Simplified: only leads and tasks; no business rules, plug-ins, duplicate
detection rules, batch ($batch) requests, or lead qualification; `$select`
filters the answer's keys; a merged lead's state is set without its status
reason being checked against Dataverse's (unverified).
"""
