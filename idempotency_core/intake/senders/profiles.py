"""Presets: how each provider's deliveries are read, verified and mapped."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from idempotency_core.intake.senders import finding
from idempotency_core.intake.senders.captcha import TOKEN_FIELDS
from idempotency_core.intake.senders.mapping import Expression, FieldMap
from idempotency_core.intake.senders.verifying import SignatureRecipe

API = "api"


@dataclass(frozen=True)
class Profile:
    name: str
    label: str
    parser: str = "json"  # see parsing.PARSERS
    json_field: str = ""
    # Ordered places the sender's own submission id may be: a header name
    # ("header:Idempotency-Key") or an expression into the document.
    id_places: tuple[Expression, ...] = ()
    # The provider's form id, namespacing the key ("" when it sends none).
    form_id: Expression = ""
    # The sender's own timestamp, part of a content fingerprint when it sends no id.
    sender_timestamp: Expression = ""
    # None: the sender cannot sign; a token authenticates it (path or `token_header`).
    signature: SignatureRecipe | None = None
    token_header: str = ""
    field_map: FieldMap = field(default_factory=FieldMap)
    # A field a person never fills; a bot does (the `html` profile's).
    honeypot: str = ""
    # "json" (200 {"event_id"}), or "html": a browser is sent 303 to the thank-you page.
    answer: str = "json"
    # The URL the sender calls, when it differs from what this server sees (a proxy
    # in front); signatures that sign the URL (HubSpot v3) are checked against it.
    public_url: str = ""
    # What to do in the provider's settings, shown on the console's source page.
    setup: str = ""

    @property
    def signs(self) -> bool:
        return self.signature is not None


_ONEFOLD_SIGNATURE = SignatureRecipe(
    header="Onefold-Signature",
    layout="{timestamp}.{body}",
    header_format="t_v1",
    tolerance_seconds=300,
)


def _detected(explicit: Expression, kind: str, answers: dict[str, Any]) -> dict[str, Any]:
    """The field a preset names where the delivery has it, else the contact's `kind`
    found among `answers` (mapping's `detect`) by type, shape, label or value."""
    return {"first": [explicit, {"detect": kind, **answers}]}


# Never the contact, in a plain form's post: the form's own machinery.
_PLAIN_FORM_MACHINERY = (
    "form",
    "submission_id",
    "website",
    "csrfmiddlewaretoken",
    # A CAPTCHA widget's token (captcha.py): proof for the hook, not a field.
    *TOKEN_FIELDS,
)
_PLAIN_FORM_ANSWERS: dict[str, Any] = {"skip": list(_PLAIN_FORM_MACHINERY)}

_PLAIN_FORM_MAP = FieldMap(
    name=_detected(
        {"first": ["name", {"concat": ["first_name", "last_name"]}]}, "name", _PLAIN_FORM_ANSWERS
    ),
    email=_detected({"first": ["email", "_replyto"]}, "email", _PLAIN_FORM_ANSWERS),
    phone=_detected({"first": ["phone", "tel"]}, "phone", _PLAIN_FORM_ANSWERS),
    message=_detected({"first": ["message", "comments"]}, "message", _PLAIN_FORM_ANSWERS),
    form="form",
    extras=[],
    skip=(
        "name",
        "first_name",
        "last_name",
        "email",
        "phone",
        "tel",
        "message",
        "comments",
        *_PLAIN_FORM_MACHINERY,
    ),
)

# Typeform's answers: the value under the key its type names ("text", "email",
# "phone_number", "choice": {"label"}), the field's type and id in `field`, the
# question's title in `definition.fields` (typeform.com/developers/webhooks/
# example-payload/; tests/fixtures/senders/providers/typeform.json).
_TYPEFORM_ANSWERS: dict[str, Any] = {
    "in": "form_response.answers",
    "id": "field.id",
    "title": "field.ref",
    "type": "field.type",
    "value": "@type",
    "titles": {
        "in": "form_response.definition.fields",
        "id": "id",
        "text": "title",
        "match": "field.id",
    },
}
# Tally's fields: label, type (INPUT_EMAIL, INPUT_PHONE_NUMBER, TEXTAREA, ...) and
# value (tally.so/help/webhooks, "Example webhook event"; tests/fixtures/senders/tally.md).
_TALLY_FIELDS: dict[str, Any] = {"in": "data.fields", "title": "label"}
# Jotform's answers are the `q<id>_<name>` keys of `rawRequest`; `pretty` gives
# their labels as the form shows them (tests/fixtures/senders/jotform*.md).
_JOTFORM_ANSWERS: dict[str, Any] = {"keys": finding.JOTFORM_QUESTION, "labels": "pretty"}
# The fields a Webflow site's designer named, a Formspree form's inputs.
_WEBFLOW_DATA: dict[str, Any] = {"in": "payload.data"}
_FORMSPREE_SUBMISSION: dict[str, Any] = {"in": "submission", "skip": ["submission_uuid"]}
# A HubSpot contact's properties: internal ones never hold what the person typed.
_HUBSPOT_PROPERTIES: dict[str, Any] = {
    "in": "properties",
    "skip": ["hs_object_id", "recent_conversion_date", "recent_conversion_event_name"],
}
_GOOGLE_FORMS_ANSWERS: dict[str, Any] = {"in": "answers", "title": "title"}
_CF7_FIELDS: dict[str, Any] = {"skip": ["submission_id"]}
_WPFORMS_FIELDS: dict[str, Any] = {"skip": ["entry_id", "form_id"]}
# A Gravity Forms entry's own properties, beside the field ids
# (docs.gravityforms.com/entry-object/).
_GRAVITY_ENTRY: dict[str, Any] = {
    "skip": [
        "id",
        "form_id",
        "post_id",
        "date_created",
        "date_updated",
        "is_starred",
        "is_read",
        "ip",
        "source_url",
        "user_agent",
        "currency",
        "payment_status",
        "payment_date",
        "payment_amount",
        "payment_method",
        "transaction_id",
        "transaction_type",
        "is_fulfilled",
        "created_by",
        "status",
        "source_id",
    ]
}


def _titled(title: str) -> dict[str, Any]:
    """A Google Forms answer by its question's title, in any case."""
    return {"find": "answers", "where": {"title": title}, "take": "value", "anycase": True}


def _answer(where: dict[str, str], take: str) -> dict[str, Any]:
    return {"find": "form_response.answers", "where": where, "take": take}


PRESETS: dict[str, Profile] = {
    preset.name: preset
    for preset in (
        # Typeform Webhooks (typeform.com/developers/webhooks/): `Typeform-Signature:
        # sha256=<base64 HMAC-SHA256(secret, raw body)>`, no timestamp; the response
        # token is the submission's id, stable across retries.
        Profile(
            name="typeform",
            label="Typeform",
            id_places=("form_response.token",),
            form_id="form_response.form_id",
            signature=SignatureRecipe(
                header="Typeform-Signature",
                encoding="base64",
                prefix="sha256=",
                tolerance_seconds=None,
            ),
            # Email and phone by their answer type; the name by the question's title
            # ("What is your first name?"); the message is the long_text answer.
            field_map=FieldMap(
                name={"detect": "name", **_TYPEFORM_ANSWERS},
                email=_detected(_answer({"type": "email"}, "email"), "email", _TYPEFORM_ANSWERS),
                phone=_detected(
                    _answer({"type": "phone_number"}, "phone_number"), "phone", _TYPEFORM_ANSWERS
                ),
                message={"detect": "message", **_TYPEFORM_ANSWERS},
                submitted_at="form_response.submitted_at",
                extras="form_response.hidden",
            ),
            setup="In the form's Connect → Webhooks, add the hook URL and set its secret "
            "to the secret shown when the source was created.",
        ),
        # Tally (tally.so/help/webhooks): `Tally-Signature: <base64 HMAC-SHA256(secret,
        # body)>`; data.responseId identifies the response; choices are option ids.
        Profile(
            name="tally",
            label="Tally",
            id_places=("data.responseId",),
            form_id="data.formId",
            signature=SignatureRecipe(
                header="Tally-Signature", encoding="base64", tolerance_seconds=None
            ),
            # Tally has no name field type: the name is an answer labelled as one.
            field_map=FieldMap(
                name={"detect": "name", **_TALLY_FIELDS},
                email={"detect": "email", **_TALLY_FIELDS},
                phone={"detect": "phone", **_TALLY_FIELDS},
                message={"detect": "message", **_TALLY_FIELDS},
                submitted_at="data.createdAt",
                form="data.formName",
                # Every other answer by its label, choices by their option labels.
                extras={"pairs": "data.fields"},
                skip=("Name", "Your name", "Email", "Phone number", "Message"),
            ),
            setup="In the form's Integrations → Webhooks, add the hook URL and the signing "
            "secret shown when the source was created.",
        ),
        # Webflow form_submission (developers.webflow.com/data/docs/working-with-webhooks):
        # x-webflow-signature = hex HMAC-SHA256(secret, "<ms timestamp>:<raw body>"),
        # x-webflow-timestamp in milliseconds, 5 minutes' tolerance; payload.id is
        # the stored submission's id.
        Profile(
            name="webflow",
            label="Webflow",
            id_places=("payload.id",),
            form_id="payload.formId",
            signature=SignatureRecipe(
                header="x-webflow-signature",
                layout="{timestamp}:{body}",
                timestamp_header="x-webflow-timestamp",
                timestamp_unit="ms",
                tolerance_seconds=300,
            ),
            # The keys are the field names the site's designer chose.
            field_map=FieldMap(
                name=_detected(
                    {
                        "first": [
                            {
                                "concat": [
                                    ["payload", "data", "First Name"],
                                    ["payload", "data", "Last Name"],
                                ]
                            },
                            ["payload", "data", "Name"],
                            ["payload", "data", "name"],
                        ]
                    },
                    "name",
                    _WEBFLOW_DATA,
                ),
                email=_detected(
                    {"first": [["payload", "data", "email"], ["payload", "data", "Email"]]},
                    "email",
                    _WEBFLOW_DATA,
                ),
                phone=_detected(
                    {"first": [["payload", "data", "Phone Number"], ["payload", "data", "Phone"]]},
                    "phone",
                    _WEBFLOW_DATA,
                ),
                message=_detected(
                    {"first": [["payload", "data", "Message"], ["payload", "data", "message"]]},
                    "message",
                    _WEBFLOW_DATA,
                ),
                submitted_at="payload.submittedAt",
                form="payload.name",
                extras="payload.data",
                skip=(
                    "First Name",
                    "Last Name",
                    "Name",
                    "name",
                    "email",
                    "Email",
                    "Phone Number",
                    "Phone",
                    "Message",
                    "message",
                ),
            ),
            setup="Create the form_submission webhook through Webflow's API (site token or "
            "app) with the hook URL; give Onefold the webhook's secretKey with --secret. "
            "Webhooks made in the site dashboard are unsigned and cannot be verified.",
        ),
        # Jotform webhooks: multipart/form-data with the answers as a JSON string in
        # `rawRequest`, `submissionID` stable; no signature: the hook path's token
        # (captured deliveries: zulip/zulip zerver/webhooks/jotform/fixtures/, copied
        # to tests/fixtures/senders/jotform-*.body; "a rawRequest field carrying the
        # submitted answers as a JSON-encoded string", Jotform's AsyncAPI description
        # at asyncapi.apis.io/asyncapis/jotform/jotform-asyncapi/). Answers are keyed
        # `q<id>_<name made from the label>` and composite widgets are objects
        # (`{"first", "last"}`, `{"full"}`, `{"area", "phone"}`, `{"addr_line1", ...}`),
        # or `q3_name[first]` fields where posted as a form: found by their shape and
        # by the labels in `pretty`, not by name.
        Profile(
            name="jotform",
            label="Jotform",
            parser="multipart_json",
            json_field="rawRequest",
            id_places=("submissionID",),
            form_id="formID",
            field_map=FieldMap(
                name={"detect": "name", **_JOTFORM_ANSWERS},
                email={"detect": "email", **_JOTFORM_ANSWERS},
                phone={"detect": "phone", **_JOTFORM_ANSWERS},
                message={"detect": "message", **_JOTFORM_ANSWERS},
                form="formTitle",
                # The form's other answers by their labels ("Type of Tutoring").
                extras={"answers": True, **_JOTFORM_ANSWERS, "omit": list(finding.KINDS)},
            ),
            setup="In the form's Settings → Integrations → WebHooks, add the hook URL "
            "(it carries the source's token).",
        ),
        # Gravity Forms Webhooks add-on (docs.gravityforms.com/triggering-webhooks-form-
        # submissions/): "All Fields" posts the entry object; `id` is the entry id;
        # no signature: the hook path's token. Field ids are per form and the entry
        # carries no types or labels: a Name field is found by its inputs (N.3 first,
        # N.6 last), the email by its value; 2, 3 and 4 are only the usual ids of a
        # contact form's email, phone and message, taken when they look the part.
        Profile(
            name="gravityforms",
            label="Gravity Forms",
            id_places=("id",),
            form_id="form_id",
            field_map=FieldMap(
                name={"detect": "name", **_GRAVITY_ENTRY},
                email=_detected({"is": "email", "of": ["2"]}, "email", _GRAVITY_ENTRY),
                phone=_detected({"is": "phone", "of": ["3"]}, "phone", _GRAVITY_ENTRY),
                message=_detected(["4"], "message", _GRAVITY_ENTRY),
                submitted_at="date_created",
            ),
            setup="Add a Webhooks feed: Request URL the hook URL, method POST, format JSON, "
            "body All Fields. The Name field and the email address are found wherever "
            "they are; phone and message are taken from fields 3 and 4 unless the "
            "source's field map names yours.",
        ),
        # Formspree signed webhooks (help.formspree.io/articles/advanced-features/verify-
        # webhook-signatures): `Formspree-Signature: t=<s>,v1=<hex HMAC(secret,
        # "<t>.<body>")>`; no submission id: the key is a fingerprint with `_date`.
        Profile(
            name="formspree",
            label="Formspree",
            id_places=("submission.submission_uuid", "submission.submission_id"),
            form_id="form",
            sender_timestamp="submission._date",
            signature=SignatureRecipe(
                header="Formspree-Signature",
                layout="{timestamp}.{body}",
                header_format="t_v1",
                tolerance_seconds=300,
            ),
            # The keys are the `name` attributes of the site's own inputs.
            field_map=FieldMap(
                name=_detected(
                    {
                        "first": [
                            "submission.name",
                            {"concat": ["submission.firstName", "submission.lastName"]},
                        ]
                    },
                    "name",
                    _FORMSPREE_SUBMISSION,
                ),
                email=_detected(
                    {"first": ["submission.email", "submission._replyto"]},
                    "email",
                    _FORMSPREE_SUBMISSION,
                ),
                phone=_detected("submission.phone", "phone", _FORMSPREE_SUBMISSION),
                message=_detected("submission.message", "message", _FORMSPREE_SUBMISSION),
                submitted_at="submission._date",
                extras="submission",
                skip=(
                    "name",
                    "firstName",
                    "lastName",
                    "email",
                    "phone",
                    "message",
                    "submission_uuid",
                    "submission_id",
                ),
            ),
            setup="In the form's Plugins → Webhook, add the hook URL; give Onefold the "
            "webhook's signing secret with --secret.",
        ),
        # HubSpot workflow "Send a webhook" action: the enrolled contact's properties;
        # signature v3 (developers.hubspot.com/docs/api/webhooks/validating-requests):
        # base64 HMAC-SHA256(client secret, method + URL + body + ms timestamp), 5 min.
        # No delivery id: the contact id and its conversion time name the submission.
        Profile(
            name="hubspot",
            label="HubSpot (workflow webhook)",
            id_places=(
                {
                    "concat": [
                        {"first": ["objectId", "vid", "properties.hs_object_id"]},
                        {
                            "first": [
                                "properties.recent_conversion_date",
                                "properties.recent_conversion_date.value",
                            ]
                        },
                    ],
                    "sep": ":",
                },
            ),
            signature=SignatureRecipe(
                header="X-HubSpot-Signature-v3",
                layout="{method}{url}{body}{timestamp}",
                encoding="base64",
                timestamp_header="X-HubSpot-Request-Timestamp",
                timestamp_unit="ms",
                tolerance_seconds=300,
            ),
            field_map=FieldMap(
                name=_detected(
                    {
                        "first": [
                            {"concat": ["properties.firstname", "properties.lastname"]},
                            {
                                "concat": [
                                    "properties.firstname.value",
                                    "properties.lastname.value",
                                ]
                            },
                        ]
                    },
                    "name",
                    _HUBSPOT_PROPERTIES,
                ),
                email=_detected(
                    {"first": ["properties.email", "properties.email.value"]},
                    "email",
                    _HUBSPOT_PROPERTIES,
                ),
                phone=_detected(
                    {"first": ["properties.phone", "properties.phone.value"]},
                    "phone",
                    _HUBSPOT_PROPERTIES,
                ),
                message=_detected(
                    {"first": ["properties.message", "properties.message.value"]},
                    "message",
                    _HUBSPOT_PROPERTIES,
                ),
                submitted_at={
                    "first": [
                        "properties.recent_conversion_date",
                        "properties.recent_conversion_date.value",
                    ]
                },
            ),
            setup="In a contact workflow enrolled on the form submission, add 'Send a "
            "webhook' (POST) to the hook URL, authenticated with the app's client secret "
            "(signature v3); include recent_conversion_date. Behind a proxy, set the "
            "profile's public_url to the URL HubSpot calls.",
        ),
        # Onefold's own Apps Script for Google Forms (shipped in the repository):
        # the response id, signed like `generic`.
        Profile(
            name="googleforms",
            label="Google Forms (Onefold's Apps Script)",
            id_places=("response_id",),
            form_id="form_id",
            signature=_ONEFOLD_SIGNATURE,
            field_map=FieldMap(
                name=_detected(_titled("Name"), "name", _GOOGLE_FORMS_ANSWERS),
                email=_detected(
                    {"first": ["respondent_email", _titled("Email")]},
                    "email",
                    _GOOGLE_FORMS_ANSWERS,
                ),
                phone=_detected(_titled("Phone"), "phone", _GOOGLE_FORMS_ANSWERS),
                message=_detected(_titled("Message"), "message", _GOOGLE_FORMS_ANSWERS),
                submitted_at="submitted_at",
                form="form_title",
                extras={"pairs": "answers", "name": "title"},
                skip=("Name", "Email", "Phone", "Message"),
            ),
            setup="Install the Apps Script from idempotency_core/intake/senders/google_forms.gs "
            "in the form (Extensions → Apps Script), set ONEFOLD_HOOK_URL and "
            "ONEFOLD_SECRET in its script properties, and add the on-form-submit trigger.",
        ),
        # Contact Form 7 through a webhook plugin (e.g. "CF7 to Webhook"): the form's
        # fields as JSON, no id, no signature: fingerprint key, the path's token.
        Profile(
            name="cf7",
            label="Contact Form 7 (webhook plugin)",
            id_places=("submission_id",),
            field_map=FieldMap(
                name=_detected("your-name", "name", _CF7_FIELDS),
                email=_detected("your-email", "email", _CF7_FIELDS),
                phone=_detected({"first": ["your-phone", "your-tel"]}, "phone", _CF7_FIELDS),
                message=_detected("your-message", "message", _CF7_FIELDS),
                extras=[],
                skip=(
                    "your-name",
                    "your-email",
                    "your-phone",
                    "your-tel",
                    "your-message",
                    "submission_id",
                ),
            ),
            setup="In the form's webhook plugin settings, post JSON to the hook URL (it "
            "carries the source's token).",
        ),
        # WPForms Webhooks add-on: the fields the admin maps, by name; map {entry_id}
        # as `entry_id` so retries and re-sends keep one key.
        Profile(
            name="wpforms",
            label="WPForms",
            id_places=("entry_id",),
            form_id="form_id",
            field_map=FieldMap(
                name=_detected("name", "name", _WPFORMS_FIELDS),
                email=_detected("email", "email", _WPFORMS_FIELDS),
                phone=_detected("phone", "phone", _WPFORMS_FIELDS),
                message=_detected("message", "message", _WPFORMS_FIELDS),
                extras=[],
                skip=("name", "email", "phone", "message", "entry_id", "form_id"),
            ),
            setup="In the form's Settings → Webhooks, send JSON to the hook URL with fields "
            "name, email, phone, message and entry_id ({entry_id} smart tag).",
        ),
        # A plain website form posted by a browser, with Onefold's form.js adding
        # `submission_id` once per form and the honeypot `website`.
        Profile(
            name="html",
            label="Website form (HTML)",
            parser="form",
            id_places=("submission_id",),
            field_map=_PLAIN_FORM_MAP,
            honeypot="website",
            answer="html",
            setup="Point the form's action at the hook URL, method POST, and add "
            '<script src="<hook URL>form.js" defer></script> to the page.',
        ),
        # Zapier, n8n, Make and hand-written senders: the JSON API's body, signed.
        Profile(
            name="generic",
            label="Generic signed JSON (Zapier, n8n, Make, your code)",
            id_places=("header:Idempotency-Key", "submission_id"),
            signature=_ONEFOLD_SIGNATURE,
            field_map=FieldMap(
                name="contact.name",
                email="contact.email",
                phone="contact.phone",
                message="message",
                submitted_at="submitted_at",
                form="form",
                extras="fields",
            ),
            setup="POST the JSON API's body with an Idempotency-Key header (the upstream "
            "record's id) and Onefold-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "
            '"<t>.<raw body>")>.',
        ),
    )
}

PROFILE_NAMES = (API, *PRESETS)
TOKEN_PROFILES = tuple(name for name, p in PRESETS.items() if not p.signs)


def profile_resolve(name: str, overrides: dict[str, Any] | None = None) -> Profile:
    """The preset `name` with a source's overrides applied (unknown keys are refused)."""
    profile = PRESETS[name]
    if not overrides:
        return profile
    known = {f.name for f in fields(Profile)}
    unknown = set(overrides) - known - {"field_map", "signature"}
    if unknown:
        raise ValueError(f"unknown profile settings: {', '.join(sorted(unknown))}")
    changes: dict[str, Any] = {k: v for k, v in overrides.items() if k in known}
    if "id_places" in changes:
        changes["id_places"] = tuple(changes["id_places"])
    if isinstance(overrides.get("field_map"), dict):
        changes["field_map"] = replace(profile.field_map, **overrides["field_map"])
    if isinstance(overrides.get("signature"), dict) and profile.signature is not None:
        changes["signature"] = replace(profile.signature, **overrides["signature"])
    return replace(profile, **changes)
