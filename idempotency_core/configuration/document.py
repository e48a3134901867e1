"""The configuration document: its shape, its validation, and the block a submission gets."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings as project_settings

from idempotency_core.configuration.review_block import review_check
from idempotency_core.configuration.templates import template_problem

Path = tuple[str | int, ...]

SECTIONS: dict[str, dict[str, str]] = {
    "enquiry": {"fields": "properties", "pipeline": "template", "stage": "template"},
    "contact": {"fields": "properties"},
    "task": {"title": "template", "assignee": "assignee", "due_in_hours": "hours"},
    "confirmation": {
        "send": "bool",
        "subject": "template",
        "text": "template",
        "html": "template",
        "reply_to": "address",
        "languages": "languages",
        "language_field": "value_path",
    },
}
LANGUAGE_KEYS = ("subject", "text", "html")
# The order keys are written in (an export): the sections' and, below them, their keys'.
SECTIONS_ORDER: dict[str, Any] = {
    section: {
        key: {"round_robin": {}, "from_field": {}, "map": {}, "default": {}}
        if key == "assignee"
        else {}
        for key in keys
    }
    for section, keys in SECTIONS.items()
}
ASSIGNEE_KINDS = {"round_robin": ("round_robin",), "from_field": ("from_field", "map", "default")}
# A form's own block, or "*" for every form a source's blocks do not name.
ANY_FORM = "*"
# A CRM property's API name: HubSpot's `company`, Salesforce's `Budget__c`, Pipedrive's
# 40-character field keys, Dataverse's `companyname`.
_PROPERTY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}")
# The operation key goes there: not the business's to set (adapters write it).
RESERVED_PROPERTIES = frozenset({"external_ref"})
MAX_PROPERTIES = 100
MAX_NAMES = 50
MAX_NAME_LENGTH = 100
MAX_DUE_HOURS = 24 * 366
# All templates of one document together: far beyond any business's configuration.
MAX_TEMPLATE_TOKENS = 10_000
CONTACT_VALUES = ("name", "first_name", "last_name", "email", "phone")
_VALUE_PATH = re.compile(
    r"fields\.[^.\s]{1,100}|contact\.(?:" + "|".join(CONTACT_VALUES) + r")|form|source|message"
)
_LANGUAGE = re.compile(r"[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8})*")
_ADDRESS = re.compile(r"[^@\s,;<>\"]+@[^@\s,;<>\"]+\.[^@\s,;<>\"]+")


class Marks(Protocol):
    """Where each value of a document read from a file is (yamlfile.py)."""

    def line_of(self, path: Path) -> int | None:
        """The line of the value at `path` (or of its key when the value has none)."""
        ...

    def key_line_of(self, path: Path) -> int | None:
        """The line of the key that names `path`."""
        ...

    def template_line(self, path: Path, line: int) -> int | None:
        """The file's line of line `line` (1 on) of the template at `path`."""
        ...


class NoMarks:
    """Marks of a document that comes from no file (the console's forms, JSON)."""

    def line_of(self, path: Path) -> int | None:
        return None

    def key_line_of(self, path: Path) -> int | None:
        return None

    def template_line(self, path: Path, line: int) -> int | None:
        return None


@dataclass(frozen=True)
class Problem:
    path: Path
    message: str
    line: int | None = None

    @property
    def where(self) -> str:
        return ".".join(str(part) for part in self.path) or "(document)"

    def __str__(self) -> str:
        prefix = f"line {self.line}: " if self.line is not None else ""
        return f"{prefix}{self.where}: {self.message}"


@dataclass
class Check:
    """One document's check under way: the problems found so far, each placed by `marks`."""

    marks: Marks
    sources: Collection[str]
    reply_to_domains: Collection[str] = ()
    problems: list[Problem] = field(default_factory=list)
    # Tags and values of the templates read so far: compiling is what costs.
    template_tokens: int = 0

    def add(self, path: Path, message: str, *, key: bool = False, line: int | None = None) -> None:
        if line is None:
            line = self.marks.key_line_of(path) if key else self.marks.line_of(path)
        self.problems.append(Problem(path, message, line))

    def mapping(self, value: object, path: Path) -> Mapping[str, Any] | None:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.add(path, f"must be a mapping, not {_kind(value)}")
            return None
        return value

    def known_keys(self, value: Mapping[str, Any], path: Path, known: Collection[str]) -> None:
        for key in value:
            if key not in known:
                self.add(
                    (*path, key),
                    f"unknown key {key!r}; expected one of {', '.join(known)}",
                    key=True,
                )


def document_problems(
    document: object,
    *,
    sources: Collection[str],
    marks: Marks | None = None,
    reply_to_domains: Collection[str] | None = None,
) -> list[Problem]:
    """Every problem of `document`, in document order; empty when it may be applied.
    `sources` are the names of the sources that exist; `reply_to_domains` those a
    Reply-To must be in (default ONEFOLD_REPLY_TO_DOMAINS; none: any)."""
    if reply_to_domains is None:
        reply_to_domains = allowed_reply_to_domains()
    check = Check(marks or NoMarks(), sources, reply_to_domains)
    top = check.mapping(document, ())
    if top is None:
        return check.problems
    check.known_keys(top, (), ("sources", "review"))
    blocks = check.mapping(top.get("sources"), ("sources",))
    for name, block in (blocks or {}).items():
        _source_check(check, name, block)
    if "review" in top:
        review_check(check, top["review"])
    return check.problems


def _source_check(check: Check, name: str, block: object) -> None:
    path: Path = ("sources", name)
    if name not in check.sources:
        check.add(
            path, f"no source is named {name!r} (manage.py create_source makes one)", key=True
        )
    source = check.mapping(block, path)
    if source is None:
        return
    check.known_keys(source, path, ("forms",))
    forms = check.mapping(source.get("forms"), (*path, "forms"))
    for form, form_block in (forms or {}).items():
        form_path = (*path, "forms", form)
        sections = check.mapping(form_block, form_path)
        if sections is None:
            continue
        check.known_keys(sections, form_path, tuple(SECTIONS))
        for section, settings in sections.items():
            if section in SECTIONS:
                _section_check(check, (*form_path, section), section, settings)


def _section_check(check: Check, path: Path, section: str, settings: object) -> None:
    values = check.mapping(settings, path)
    if values is None:
        return
    expected = SECTIONS[section]
    check.known_keys(values, path, tuple(expected))
    for key, value in values.items():
        if key in expected:
            _VALUE_CHECKS[expected[key]](check, (*path, key), value)
    if section == "confirmation" and values.get("languages") and not values.get("language_field"):
        check.add((*path, "languages"), "languages need a language_field to choose by", key=True)


def _template_check(check: Check, path: Path, value: object) -> None:
    if not isinstance(value, str):
        check.add(path, f"must be a template (text; quote a number), not {_kind(value)}")
        return
    tokens = value.count("{{") + value.count("{%")
    check.template_tokens += tokens
    if check.template_tokens > MAX_TEMPLATE_TOKENS:
        # Checked within seconds whatever the file: past this, nothing more is compiled.
        if check.template_tokens - tokens <= MAX_TEMPLATE_TOKENS:
            check.add(path, f"the templates hold more than {MAX_TEMPLATE_TOKENS} tags and values")
        return
    # The HTML email's, and each language's: a value where it would be loaded is refused.
    problem = template_problem(value, html=path[-1] == "html")
    if problem is not None:
        line = check.marks.template_line(path, problem.line)
        check.add(path, f"template line {problem.line}: {problem.message}", line=line)


def _properties_check(check: Check, path: Path, value: object) -> None:
    properties = check.mapping(value, path)
    if properties is None:
        return
    if len(properties) > MAX_PROPERTIES:
        check.add(path, f"at most {MAX_PROPERTIES} properties")
    for name, template in properties.items():
        if _PROPERTY.fullmatch(name) is None:
            check.add((*path, name), f"{name!r} is not a CRM property name", key=True)
        elif name in RESERVED_PROPERTIES:
            check.add((*path, name), f"{name!r} holds Onefold's reference: not settable", key=True)
        _template_check(check, (*path, name), template)


def _assignee_check(check: Check, path: Path, value: object) -> None:
    if isinstance(value, str):
        _name_check(check, path, value)
        return
    if not isinstance(value, Mapping):
        check.add(
            path, f"must be a name or a mapping (round_robin, from_field), not {_kind(value)}"
        )
        return
    kinds = [kind for kind in ASSIGNEE_KINDS if kind in value]
    if len(kinds) != 1:
        check.add(path, "give either round_robin: [names] or from_field: with map: and default:")
        return
    check.known_keys(value, path, ASSIGNEE_KINDS[kinds[0]])
    if kinds[0] == "round_robin":
        names = value["round_robin"]
        if not isinstance(names, list) or not 1 <= len(names) <= MAX_NAMES:
            check.add((*path, "round_robin"), f"must be a list of 1 to {MAX_NAMES} names")
            return
        for number, name in enumerate(names):
            _name_check(check, (*path, "round_robin", number), name)
        return
    _value_path_check(check, (*path, "from_field"), value["from_field"])
    choices = check.mapping(value.get("map"), (*path, "map"))
    for choice, name in (choices or {}).items():
        _name_check(check, (*path, "map", choice), name)
    if "default" in value:
        _name_check(check, (*path, "default"), value["default"])


def _name_check(check: Check, path: Path, value: object) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_LENGTH:
        check.add(path, f"must be a name (text of 1 to {MAX_NAME_LENGTH} characters)")


def _value_path_check(check: Check, path: Path, value: object) -> None:
    if not isinstance(value, str) or _VALUE_PATH.fullmatch(value) is None:
        check.add(
            path,
            "must name a value of the submission: fields.<name>, contact.<name|first_name|"
            "last_name|email|phone>, form, source or message",
        )


def _hours_check(check: Check, path: Path, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        check.add(path, f"must be a number of hours, not {_kind(value)}")
    elif not 0 < value <= MAX_DUE_HOURS:
        check.add(path, f"must be more than 0 and at most {MAX_DUE_HOURS} hours")


def _bool_check(check: Check, path: Path, value: object) -> None:
    if not isinstance(value, bool):
        check.add(path, f"must be true or false, not {_kind(value)}")


def _address_check(check: Check, path: Path, value: object) -> None:
    _template_check(check, path, value)
    if not isinstance(value, str):
        return
    if "{" not in value and not is_address(value):
        check.add(path, f"{value!r} is not one email address")
    elif check.reply_to_domains and not in_domains(value, check.reply_to_domains):
        # A template's value is known only when rendered: its domain must be written.
        check.add(
            path,
            f"must be an address in {', '.join(check.reply_to_domains)} "
            "(ONEFOLD_REPLY_TO_DOMAINS), its domain written out",
        )


def _languages_check(check: Check, path: Path, value: object) -> None:
    languages = check.mapping(value, path)
    for code, variant in (languages or {}).items():
        if _LANGUAGE.fullmatch(code) is None:
            check.add((*path, code), f"{code!r} is not a language code (en, fr, pt-BR)", key=True)
        texts = check.mapping(variant, (*path, code))
        if texts is None:
            continue
        check.known_keys(texts, (*path, code), LANGUAGE_KEYS)
        for key in LANGUAGE_KEYS:
            if key in texts:
                _template_check(check, (*path, code, key), texts[key])


_VALUE_CHECKS: dict[str, Callable[[Check, Path, object], None]] = {
    "template": _template_check,
    "properties": _properties_check,
    "assignee": _assignee_check,
    "hours": _hours_check,
    "bool": _bool_check,
    "address": _address_check,
    "languages": _languages_check,
    "value_path": _value_path_check,
}


def allowed_reply_to_domains() -> tuple[str, ...]:
    """ONEFOLD_REPLY_TO_DOMAINS, lower case; empty: any domain."""
    domains = getattr(project_settings, "ONEFOLD_REPLY_TO_DOMAINS", None) or ()
    return tuple(str(domain).strip().lower().strip(".") for domain in domains if domain)


def in_domains(address: str, domains: Collection[str]) -> bool:
    """Whether `address` (or a template ending in `@domain`) is in one of `domains` or
    a subdomain of one."""
    domain = address.strip().rpartition("@")[2].lower().rstrip(".")
    if not domain or "{" in domain or "}" in domain:
        return False
    return any(domain == allowed or domain.endswith(f".{allowed}") for allowed in domains)


def is_address(value: str) -> bool:
    """One plain email address (what a Reply-To may hold): no name, list or line break."""
    return _ADDRESS.fullmatch(value.strip()) is not None


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    return {bool: "true/false", int: "a number", float: "a number", str: "text"}.get(
        type(value), "a list" if isinstance(value, list) else "a mapping"
    )


def form_block(
    document: Mapping[str, Any], source: str, form: str
) -> tuple[str, Mapping[str, Any]]:
    """The block that applies to a submission of `form` at `source`, and its form key:
    the form's own, else `"*"`, else nothing (`{}`, Onefold's built-in content)."""
    sources = document.get("sources") or {}
    forms = (sources.get(source) or {}).get("forms") or {}
    if form in forms:
        return form, forms[form] or {}
    return ANY_FORM, forms.get(ANY_FORM) or {}


@dataclass(frozen=True)
class ConfiguredNames:
    """What a source's blocks name in its CRM, for checking against the CRM's schema and
    owners (`check_destinations`): property names per object, assignee names, and the
    pipelines and stages written as plain text (a template's value is known only when
    rendered, so it is not listed)."""

    enquiry_properties: frozenset[str]
    contact_properties: frozenset[str]
    assignees: frozenset[str]
    pipelines: frozenset[str]
    stages: frozenset[str]


def configured_names(document: Mapping[str, Any], source: str) -> ConfiguredNames:
    """Every CRM name `source`'s blocks (all forms) use, from a validated document."""
    forms = ((document.get("sources") or {}).get(source) or {}).get("forms") or {}
    found: dict[str, set[str]] = {key: set() for key in ConfiguredNames.__dataclass_fields__}
    for block in forms.values():
        block = block or {}
        enquiry = block.get("enquiry") or {}
        found["enquiry_properties"] |= set(enquiry.get("fields") or {})
        found["contact_properties"] |= set((block.get("contact") or {}).get("fields") or {})
        for key, bucket in (("pipeline", "pipelines"), ("stage", "stages")):
            value = enquiry.get(key)
            if isinstance(value, str) and value.strip() and "{" not in value:
                found[bucket].add(value.strip())
        found["assignees"] |= _assignee_names((block.get("task") or {}).get("assignee"))
    return ConfiguredNames(**{key: frozenset(names) for key, names in found.items()})


def _assignee_names(spec: object) -> set[str]:
    if isinstance(spec, str):
        return {spec.strip()} if spec.strip() else set()
    if not isinstance(spec, Mapping):
        return set()
    names = [*(spec.get("round_robin") or []), *(spec.get("map") or {}).values()]
    if spec.get("default"):
        names.append(spec["default"])
    return {str(name).strip() for name in names if str(name).strip()}
