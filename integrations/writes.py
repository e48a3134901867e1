"""The keyword arguments of the adapters' writes, declared once for the protocols
(`integrations.base`) and every adapter (`**record: Unpack[NewRecord]`); an absent key
takes the default noted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NotRequired, TypedDict


@dataclass(frozen=True)
class RecordContent:
    """What the business configured an enquiry to carry beyond its core fields, rendered
    once for the operation (the engine's execution/content.py): the same on every retry.

    `properties` go on the enquiry object itself (a deal's `amount`, a lead's
    `Company`), `contact_properties` on its contact or person, where the CRM has one;
    `pipeline` and `stage` place it ("": the adapter's own setting).
    Names are the CRM's property names as the configuration wrote them; whether the CRM
    has them is checked against its schema by `check_destinations`, not here. Empty
    (the default) means the adapter's built-in content alone."""

    properties: dict[str, str] = field(default_factory=dict)
    contact_properties: dict[str, str] = field(default_factory=dict)
    pipeline: str = ""
    stage: str = ""


NO_CONTENT = RecordContent()


class NewRecord(TypedDict):
    """`CrmAdapter.create_record`'s arguments."""

    external_ref: str
    fields: dict[str, Any]
    allow_duplicate: NotRequired[bool]  # default False
    content: NotRequired[RecordContent]  # default NO_CONTENT


class RecordUpdate(TypedDict):
    """`CrmAdapter.update_record`'s arguments."""

    record_id: str
    fields: dict[str, Any]
    content: NotRequired[RecordContent]  # default NO_CONTENT


class NewTask(TypedDict):
    """`CrmAdapter.create_task`'s arguments."""

    record_id: str
    external_ref: str
    title: str
    assignee: str
    due_at: NotRequired[datetime | None]  # default None
    assignee_is_owner: NotRequired[bool]  # default False


def content_of(call: NewRecord | RecordUpdate) -> RecordContent:
    """The configured content a create or an update carries (NO_CONTENT: none)."""
    return call.get("content", NO_CONTENT)


class MailMessage(TypedDict):
    """`EmailAdapter.send`'s arguments."""

    operation_key: str
    to: str
    subject: str
    body: str
    html: NotRequired[str | None]  # default None
    reply_to: NotRequired[str | None]  # default None
