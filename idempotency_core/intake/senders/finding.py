"""The contact found by the structure of a delivery and the form's own labels."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.core.exceptions import ValidationError

from idempotency_core.intake.api.serializers import EMAIL_REGEX, IdnaEmailValidator

KINDS = ("name", "email", "phone", "message")


@dataclass(frozen=True)
class Answer:
    """One answer of a form: its key in the delivery, its value as sent, the
    provider's type for it ("" when none is sent) and the form's label for it
    ("" when the delivery does not say)."""

    key: str
    value: Any
    type: str = ""
    label: str = ""
    # The provider's type, case folded as the type sets below are written, and the
    # label (or the key's own words) as lower-case words, for matching. Every finding
    # reads both of every answer: set once here (a cached_property's lock cost more
    # than the work on a form of 1,000 fields).
    kind: str = field(init=False, repr=False, compare=False)
    words: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", self.type.casefold())
        object.__setattr__(self, "words", _words(self.label or key_label(self.key)))


@dataclass(frozen=True)
class Found:
    value: str
    # The answers the value came from, so that extra fields need not repeat it.
    keys: tuple[str, ...]


# Provider field types, compared case-insensitively. Tally: INPUT_EMAIL,
# INPUT_PHONE_NUMBER, TEXTAREA, HIDDEN_FIELDS, PAYMENT (tally.so/help/webhooks);
# Typeform: the field types email, phone_number, long_text (typeform.com/developers/
# webhooks/example-payload/); Jotform's API: control_email, control_phone,
# control_fullname, control_textarea; Gravity Forms and WPForms field types: name,
# email, phone, textarea; Google Forms (Onefold's script): PARAGRAPH_TEXT.
_EMAIL_TYPES = frozenset({"input_email", "email", "control_email"})
_PHONE_TYPES = frozenset({"input_phone_number", "phone_number", "phone", "control_phone", "tel"})
_NAME_TYPES = frozenset({"control_fullname", "name"})
_TEXTAREA_TYPES = frozenset({"textarea", "long_text", "control_textarea", "paragraph_text"})
# Never a respondent's own contact: a hidden field carries what the page put there
# (a referrer, a campaign); a payment field's email is the payer's, per provider.
_NOT_CONTACT_TYPES = frozenset(
    {"hidden_fields", "hidden", "control_hidden", "payment", "calculated_fields"}
)

# Labels, matched on lower-case words (`_words`), so "E-mail" is "e mail" and
# "Student's Name" is "student s name".
_EMAIL_LABEL = re.compile(r"\b(e ?mail|email address|courriel|correo)\b")
_PHONE_LABEL = re.compile(
    r"\b(phone|telephone|tel|mobile|cell|cellphone|whatsapp|telefon|telefone|"
    r"contact number|phone number)\b"
)
_FIRST_LABEL = re.compile(r"\b(first ?name|given ?name|fname|forename|prenom|vorname)\b")
_LAST_LABEL = re.compile(r"\b(last ?name|surname|family ?name|lname|nachname)\b")
_NAME_LABEL = re.compile(r"\b(name|full ?name|your ?name|nom|nombre|nome|naam|navn|namn)\b")
# A name, but not the respondent's: "Company name", "File name", "Username", ...
_NOT_A_PERSON = re.compile(
    r"\b(company|business|organi[sz]ation|org|school|file|user|username|pet|product|"
    r"project|event|street|team|site|website|domain|brand|account|middle|maiden|nick|"
    r"nickname|course|class|group|venue|property|vehicle|device|app|application|club|"
    r"store|shop|job|position|role|title|reference|item|host|server|form|page)\b"
)
_MESSAGE_LABEL = re.compile(
    r"\b(message|your message|comments?|enquiry|inquiry|how can we help|"
    r"how can i help|what can we do|tell us|anything else|additional information)\b"
)
_MESSAGE_LABEL_WEAK = re.compile(
    r"\b(feedback|details|notes?|description|questions?|requests?|remarks|more info)\b"
)

# Jotform's question keys: `q<id>_<unique name>` (tests/fixtures/senders/jotform*.md).
JOTFORM_QUESTION = r"^q\d+_"
_QUESTION_PREFIX = re.compile(JOTFORM_QUESTION)
# A composite answer posted as form fields: Jotform's own form markup names them
# `q3_name[first]`, `q6_phoneNumber[area]`, `q5_address[addr_line1]`.
_BRACKETED = re.compile(r"^([^\[\]]+)\[([^\[\]]+)\]$")
# A Gravity Forms input of a multi-input field: `<field id>.<input id>`
# (docs.gravityforms.com/entry-object/). A Name field's inputs are 2 prefix,
# 3 first, 4 middle, 6 last, 8 suffix (docs.gravityforms.com/name/).
_GF_INPUT = re.compile(r"^(\d+)\.(\d+)$")
_GF_NAME_INPUTS = {"2": "prefix", "3": "first", "4": "middle", "6": "last", "8": "suffix"}

_NAME_PARTS = ("prefix", "first", "middle", "last", "suffix")
_PHONE_PARTS = ("country", "area", "phone")
_ADDRESS_PARTS = ("addr_line1", "addr_line2", "city", "state", "postal", "country")
_DATE_PARTS = ("year", "month", "day")

# Jotform's appointment and matrix widgets send their settings with every answer,
# chosen or not (`{"implementation": "new", "date": "", "duration": "60", ...}`,
# `{"colIds": ..., "rowIds": ...}` in the captured tutoring form): not an answer.
_WIDGET_SETTINGS = frozenset({"implementation", "duration", "timezone", "colIds", "rowIds"})

_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Za-z])(?=\d)")
_SEPARATORS = re.compile(r"[\s_\-.]+")
_WORD = re.compile(r"[a-z0-9]+")
_PHONE_TEXT = re.compile(r"\A\+?[\d\s().\-/]+\Z")
_EMAIL_CHECK = IdnaEmailValidator(EMAIL_REGEX)
# Label matching against `pretty` compares every answer with the text once; past
# this much work (a hostile delivery) the keys' own words are used instead.
_LABEL_WORK_LIMIT = 20_000_000


def key_label(key: str) -> str:
    """The words a key was made from: `q3_studentsName` is "students Name",
    `your-email` "your email", `firstName` "first Name"."""
    words = _QUESTION_PREFIX.sub("", key)
    words = _CAMEL.sub(" ", words)
    return _SEPARATORS.sub(" ", words).strip()


def is_email(value: Any) -> bool:
    """An address the JSON API itself would take (one rule: its serializer's)."""
    if not isinstance(value, str) or "@" not in value:
        return False
    try:
        _EMAIL_CHECK(value.strip())
    except ValidationError:
        return False
    return True


def is_phone(value: Any) -> bool:
    """Digits a person can dial: at least 6, with only spaces, dots, dashes,
    slashes, brackets and a leading `+` around them."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return False
    written = str(value).strip()
    digits = sum(c.isdigit() for c in written)
    return 6 <= digits <= 20 and bool(_PHONE_TEXT.match(written))


def fold_composites(entries: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Composite answers posted as one field per part become one answer: Jotform's
    `q3_name[first]` and `q3_name[last]` become `q3_name: {first, last}`; a Gravity
    Forms Name field's `1.3` and `1.6` become `1: {first, last}`. Order is kept
    (a composite takes the place of its first part)."""
    entries = list(entries)
    groups: dict[str, dict[str, Any]] = {}
    gf_names = _gravity_name_fields(key for key, _ in entries)
    folded: list[tuple[str, Any]] = []
    for key, value in entries:
        bracketed = _BRACKETED.match(key)
        gf_input = _GF_INPUT.match(key)
        if bracketed:
            parent, part = bracketed.groups()
        elif gf_input and gf_input.group(1) in gf_names:
            parent, part = gf_input.group(1), _GF_NAME_INPUTS[gf_input.group(2)]
        else:
            folded.append((key, value))
            continue
        if parent not in groups:
            groups[parent] = {}
            folded.append((parent, groups[parent]))
        groups[parent][part] = value
    return folded


def answers_labelled(answers: Sequence[Answer], labels: str) -> list[Answer]:
    """Each answer with the label a "Label:value, Label:value" text gives it (Jotform's
    `pretty`). Labels and values may contain ": " or ", ", so the text is not split: each
    answer's value is found in turn after the previous one, its label what lies between.
    """
    if not labels or len(answers) * len(labels) > _LABEL_WORK_LIMIT:
        return list(answers)
    labelled: list[Answer] = []
    position = 0
    lost_track = False
    for answer in answers:
        writings = _pretty_writings(answer.value)
        if not writings:
            lost_track = lost_track or _filled(answer.value)
            labelled.append(answer)
            continue
        found = _earliest(labels, writings, position)
        if found is None:
            lost_track = True
            labelled.append(answer)
            continue
        start, writing = found
        label = labels[position:start]
        label = label[2:] if label.startswith(", ") else label
        if lost_track:
            label = label.rsplit(", ", 1)[-1]
        lost_track = False
        position = start + 1 + len(writing)
        labelled.append(replace(answer, label=label.strip()))
    return labelled


def find(kind: str, answers: Sequence[Answer]) -> Found | None:
    """The contact's `kind` ("name", "email", "phone" or "message") among the answers."""
    if kind not in KINDS:
        raise ValueError(f"nothing is found for {kind!r}: one of {', '.join(KINDS)}")
    candidates = [a for a in answers if a.kind not in _NOT_CONTACT_TYPES]
    return {"name": _name, "email": _email, "phone": _phone, "message": _message}[kind](candidates)


def readable(answers: Sequence[Answer], *, omit: Iterable[str] = ()) -> dict[str, Any]:
    """The answers as extra fields, by the form's label: composite widgets written
    as text, empty answers left out, and the keys in `omit` (what is mapped to the
    contact already) left out too."""
    omitted = set(omit)
    fields: dict[str, Any] = {}
    for answer in answers:
        if answer.key in omitted or not _filled(answer.value):
            continue
        name = answer.label or answer.key
        if name in fields:
            name = f"{name} ({answer.key})"
        fields[name] = _readable_value(answer.value)
    return fields


def widget_text(value: Any) -> str | None:
    """A composite widget written as a person would read it, or None when `value`
    is not one (Jotform's full name, phone, address and date; Gravity Forms' name)."""
    if not isinstance(value, dict) or not value:
        return None
    keys = set(value)
    parts: Sequence[str]
    if _is_name(value):
        parts, sep = _NAME_PARTS, " "
    elif _is_phone_widget(value):
        if "full" in value:
            return _part(value, "full")
        country = _part(value, "country")
        if country and not country.startswith("+"):
            country = f"+{country}"
        return " ".join(p for p in (country, _part(value, "area"), _part(value, "phone")) if p)
    elif keys <= set(_ADDRESS_PARTS) and keys & {"addr_line1", "city", "postal"}:
        parts, sep = _ADDRESS_PARTS, ", "
    elif keys <= set(_DATE_PARTS) and keys == set(_DATE_PARTS):
        year, month, day = (_part(value, p) for p in _DATE_PARTS)
        if year and month and day and f"{year}{month}{day}".isdigit():
            return f"{int(year):04d}-{int(month):02d}-{int(day):02d}"
        return " ".join(p for p in (year, month, day) if p)
    else:
        return None
    return sep.join(p for p in (_part(value, k) for k in parts) if p)


def _name(answers: Sequence[Answer]) -> Found | None:
    for answer in answers:
        if answer.kind in _NAME_TYPES:
            written = widget_text(answer.value) if isinstance(answer.value, dict) else None
            value = written if written is not None else _scalar(answer.value)
            if value:
                return Found(value, (answer.key,))
    for answer in answers:
        if _is_name(answer.value):
            value = widget_text(answer.value) or ""
            if value:
                return Found(value, (answer.key,))
    first = next((a for a in answers if _named(a, _FIRST_LABEL) and _scalar(a.value)), None)
    last = next((a for a in answers if _named(a, _LAST_LABEL) and _scalar(a.value)), None)
    if first is not None or last is not None:
        used = [a for a in (first, last) if a is not None]
        return Found(" ".join(_scalar(a.value) for a in used), tuple(a.key for a in used))
    for answer in answers:
        words = answer.words
        if not _NAME_LABEL.search(words) or _NOT_A_PERSON.search(words):
            continue
        value = _scalar(answer.value)
        if isinstance(answer.value, dict) and "full" in answer.value:
            value = _part(answer.value, "full")
        if value and not is_email(value):
            return Found(value, (answer.key,))
    return None


def _email(answers: Sequence[Answer]) -> Found | None:
    for answer in answers:
        if answer.kind in _EMAIL_TYPES and is_email(answer.value):
            return Found(answer.value.strip(), (answer.key,))
    for answer in answers:
        if _EMAIL_LABEL.search(answer.words) and is_email(answer.value):
            return Found(answer.value.strip(), (answer.key,))
    # By value: an address wherever it is, if the delivery holds exactly one (two
    # different ones, "yours" and "a friend's", are not ours to choose between).
    addresses = [a for a in answers if is_email(a.value)]
    if len({a.value.strip().casefold() for a in addresses}) == 1:
        return Found(addresses[0].value.strip(), tuple(a.key for a in addresses))
    return None


def _phone(answers: Sequence[Answer]) -> Found | None:
    for answer in answers:
        if answer.kind in _PHONE_TYPES:
            value = widget_text(answer.value) or _scalar(answer.value)
            if value and any(c.isdigit() for c in value):
                return Found(value, (answer.key,))
    for answer in answers:
        if _is_phone_widget(answer.value):
            value = widget_text(answer.value) or ""
            if is_phone(value):
                return Found(value, (answer.key,))
    for answer in answers:
        if _PHONE_LABEL.search(answer.words) and is_phone(answer.value):
            return Found(str(answer.value).strip(), (answer.key,))
    return None


def _message(answers: Sequence[Answer]) -> Found | None:
    # A form of several long answers ("Describe your project", "Comments"): the one
    # labelled as a message, else the first.
    typed = [a for a in answers if a.kind in _TEXTAREA_TYPES and _scalar(a.value)]
    labelled = (
        a for p in (_MESSAGE_LABEL, _MESSAGE_LABEL_WEAK) for a in typed if p.search(a.words)
    )
    chosen = next(labelled, typed[0] if typed else None)
    if chosen is not None:
        return Found(_scalar(chosen.value), (chosen.key,))
    for pattern in (_MESSAGE_LABEL, _MESSAGE_LABEL_WEAK):
        for answer in answers:
            value = _scalar(answer.value) if isinstance(answer.value, str) else ""
            if value and pattern.search(answer.words) and not is_email(value):
                return Found(value, (answer.key,))
    return None


def _named(answer: Answer, pattern: re.Pattern[str]) -> bool:
    return bool(pattern.search(answer.words))


def _is_name(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and set(value) <= set(_NAME_PARTS)
        and bool({"first", "last"} & set(value))
    )


def _is_phone_widget(value: Any) -> bool:
    """Jotform's phone: `{full}` with an input mask, else `{area, phone}` (and a
    `country` where the form asks for one)."""
    if not isinstance(value, dict) or not value:
        return False
    keys = set(value)
    if keys == {"full"}:
        return is_phone(value["full"])
    return keys <= set(_PHONE_PARTS) and "phone" in keys


def _gravity_name_fields(keys: Iterable[str]) -> set[str]:
    """The Gravity Forms fields whose inputs are a Name field's and only those:
    an address (inputs 1 to 6) or a checkbox list (1, 2, 3, ...) also has an
    input 3 or 6, but always an input 1 too."""
    inputs: dict[str, set[str]] = {}
    for key in keys:
        matched = _GF_INPUT.match(key)
        if matched:
            inputs.setdefault(matched.group(1), set()).add(matched.group(2))
    return {
        field
        for field, found in inputs.items()
        if found <= set(_GF_NAME_INPUTS) and found & {"3", "6"}
    }


def _scalar(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, str | int | float):
        return str(value).strip()
    return ""


def _part(value: dict[str, Any], key: str) -> str:
    return _scalar(value.get(key))


def _filled(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_filled(v) for k, v in value.items() if k not in _WIDGET_SETTINGS)
    if isinstance(value, list):
        return any(_filled(v) for v in value)
    return value not in (None, "")


def _readable_value(value: Any) -> Any:
    if isinstance(value, dict):
        written = widget_text(value)
        if written is not None:
            return written
        return {str(k): v for k, v in value.items() if _filled(v)}
    if isinstance(value, list):
        return [v for v in value if _filled(v)]
    return value


def _pretty_writings(value: Any) -> list[str]:
    """How Jotform may write `value` in `pretty` ([] when it cannot be told)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, str | int | float):
        written = str(value).strip()
        return [written] if written else []
    if isinstance(value, list):
        items = [str(v).strip() for v in value if isinstance(v, str | int) and str(v).strip()]
        return list(dict.fromkeys([" ".join(items), ", ".join(items)])) if items else []
    if isinstance(value, dict):
        widget = widget_text(value)
        if not widget:
            return []
        writings = [widget]
        if _is_phone_widget(value) and "full" not in value:
            area, phone = _part(value, "area"), _part(value, "phone")
            writings += [f"({area}) {phone}", f"{area}-{phone}", f"{area}{phone}"]
        if set(value) <= set(_ADDRESS_PARTS):
            writings.append(" ".join(p for p in (_part(value, k) for k in _ADDRESS_PARTS) if p))
        return list(dict.fromkeys(writings))
    return []


def _earliest(labels: str, writings: Sequence[str], position: int) -> tuple[int, str] | None:
    """Where ":<writing>" ends an entry (before ", " or the end), earliest first."""
    best: tuple[int, str] | None = None
    for writing in writings:
        entry = re.compile(re.escape(":" + writing) + r"(?=, |\Z)")
        found = entry.search(labels, position)
        if found is not None and (best is None or found.start() < best[0]):
            best = (found.start(), writing)
    return best


def _words(label: str) -> str:
    return " ".join(_WORD.findall(label.casefold()))
