"""The words a case page must not say outside its "Technical details".

Shared by the server-rendered scan (tests/review_console/test_plain_words.py) and the
browser's (tests/review_console/cases/test_reviewer_day_browser.py): codes (snake_case, which
also catches keys such as `opk_...` and record ids such as `rec_000012`), exception
class names, the words "operation", "idempotency", "ambiguous", "retryable", HTTP and
SMTP, "destination", "delivery", "field map", "audit trail", "Event source", "Key or
reference", "Message-ID", parenthesised status codes, actor ids (`user:rita`, `system:worker`), a
destination's configured name ("crm"), and each event and operation key the database
holds.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from idempotency_core.models import Event, Operation

PATTERNS: dict[str, re.Pattern[str]] = {
    "code": re.compile(r"\b[a-z]+_[a-z0-9_]+\b"),
    "protocol": re.compile(r"\b(?:HTTP|SMTP)\b"),
    "status code": re.compile(r"\(\s*[1-5]\d\d\s*\)"),
    "exception class": re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b"),
    "operation": re.compile(r"\boperations?\b", re.IGNORECASE),
    "idempotency": re.compile(r"\bidempoten\w*", re.IGNORECASE),
    "ambiguous": re.compile(r"\bambiguous\b", re.IGNORECASE),
    "retryable": re.compile(r"\bretryable\b", re.IGNORECASE),
    "actor id": re.compile(r"\b(?:user|system):\w+"),
    "destination name": re.compile(r"\bcrm\b"),
    "normal try": re.compile(r"\bNormal try\b"),
    "external reference": re.compile(r"\bexternal ref", re.IGNORECASE),
    # Words an office manager does not use for what they name: the CRM or the mail
    # service, what the website sent, how its fields are read, the history of decisions.
    "destination": re.compile(r"\bdestinations?\b", re.IGNORECASE),
    "delivery": re.compile(r"\bdeliver(?:y|ies)\b", re.IGNORECASE),
    "field map": re.compile(r"\bfield[- ]maps?\b", re.IGNORECASE),
    "audit trail": re.compile(r"\baudit trail\b", re.IGNORECASE),
    "event source": re.compile(r"\bEvent source\b", re.IGNORECASE),
    "key or reference": re.compile(r"\bKey or reference\b", re.IGNORECASE),
    "message id": re.compile(r"\bMessage-ID\b", re.IGNORECASE),
    # A filter or a cause as the machine stores it: URL-encoded, or a JSON list.
    "encoded": re.compile(r"%[0-9A-F]{2}"),
    "json list": re.compile(r"\[\s*\""),
}


def stored_keys() -> set[str]:
    """Every event key and operation key in the database: none may be read in clear."""
    keys = set(Event.objects.values_list("key", flat=True))
    keys |= set(Operation.objects.values_list("key", flat=True))
    return {k for k in keys if len(k) >= 4}


def jargon_in(text: str, keys: set[str]) -> list[str]:
    """Each piece of jargon found in `text`, as "kind: match"."""
    found = [f"{kind}: {m.group(0)}" for kind, p in PATTERNS.items() for m in p.finditer(text)]
    found += [f"key: {key}" for key in keys if key in text]
    return found


class MainText(HTMLParser):
    """The text of <main> a person reads, in Onefold's words: not inside <details
    class="technical">, a script, a style, a <pre>, a form field's value, nor the
    customer's own words (class "customer-words": their message, which may quote anything)."""

    HIDDEN = {"script", "style", "pre", "textarea", "template"}
    VOID = {"br", "input", "meta", "link", "img", "hr", "source", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.in_main = 0
        self.hidden = 0
        self.stack: list[tuple[str, bool]] = []
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        hide = (
            tag in self.HIDDEN
            or (tag == "details" and "technical" in classes)
            or "customer-words" in classes
        )
        self.stack.append((tag, hide))
        self.hidden += hide
        self.in_main += tag == "main"

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID or not self.stack:
            return
        opened, hide = self.stack.pop()
        self.hidden -= hide
        self.in_main -= opened == "main"

    def handle_data(self, data: str) -> None:
        if self.in_main and not self.hidden:
            self.parts.append(data)


def main_text(html: str) -> str:
    parser = MainText()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())
