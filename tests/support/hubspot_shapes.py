"""HubSpot's request and response shapes, from its Apache-2.0 Python client.

`hubspot-api-client` (https://github.com/HubSpot/hubspot-api-python, a dev dependency)
is generated from HubSpot's API descriptions: each model class names its fields
(`attribute_map`), their types (`openapi_types`), and in its setters which are required
and which take only some values. `schema` turns a model into a JSON Schema, so that
jsonschema judges a body and names what is wrong as openapi-core does for Resend.
`ROUTES` says which model each operation the adapter calls sends and answers.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from hubspot.crm.objects.configuration import Configuration

_PRIMITIVES: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string"},
    "date": {"type": "string"},
    "object": {},
}
_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict[\[(]str, (.+)[\])]$")
_PROBE = "\0onefold-probe"


def _type_schema(module: str, spelled: str) -> dict[str, Any]:
    if spelled in _PRIMITIVES:
        return dict(_PRIMITIVES[spelled])
    if match := _LIST.match(spelled):
        return {"type": "array", "items": _type_schema(module, match.group(1))}
    if match := _DICT.match(spelled):
        return {"type": "object", "additionalProperties": _type_schema(module, match.group(1))}
    return {"$ref": f"#/$defs/{spelled}"}


def _probe(cls: type, attr: str, value: Any) -> str | None:
    """The setter's complaint about `value`, or None: how the client's validation shows."""
    model = cls.__new__(cls)
    model.local_vars_configuration = Configuration()
    model.local_vars_configuration.client_side_validation = True
    try:
        setattr(model, attr, value)
    except (ValueError, TypeError) as error:
        return str(error)
    return None


def _model_schema(module: str, name: str) -> dict[str, Any]:
    cls = getattr(importlib.import_module(module), name)
    properties: dict[str, Any] = {}
    required = []
    for attr, spelled in cls.openapi_types.items():
        key = cls.attribute_map[attr]
        properties[key] = _type_schema(module, spelled)
        if "must not be `None`" in (_probe(cls, attr, None) or ""):
            required.append(key)
        if spelled == "str" and "must be one of" in (complaint := _probe(cls, attr, _PROBE) or ""):
            properties[key]["enum"] = ast.literal_eval(complaint[complaint.rindex("[") :])
    return {"type": "object", "properties": properties, "required": required}


@cache
def schema(module: str, name: str) -> dict[str, Any]:
    """The JSON Schema of model `name` in `module` (e.g. hubspot.crm.deals.models), with
    every model it refers to under `$defs`."""
    defs: dict[str, Any] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        if current in defs:
            continue
        defs[current] = _model_schema(module, current)
        pending += re.findall(r'"#/\$defs/([^"]+)"', repr(defs[current]).replace("'", '"'))
    return {"$ref": f"#/$defs/{name}", "$defs": defs}


@dataclass(frozen=True)
class Route:
    """One operation: its method and path (a regular expression), the model its request
    body must fit (None: no body) and the model of each success status. Any 4xx or 5xx
    answer is HubSpot's shared Error (https://developers.hubspot.com/docs/api/error-handling)."""

    method: str
    path: str
    module: str
    request: str | None = None
    answers: dict[int, str | None] = field(default_factory=dict)

    def models(self, method: str, path: str) -> str | None:
        """The module of the models for this request, or None when it is not this route."""
        match = re.fullmatch(self.path, path) if method == self.method else None
        if match is None:
            return None
        return self.module.format(object=_OBJECT_MODULES.get(match.groupdict().get("object", "")))


# Each object type's models, one shape for all: contacts, deals, tickets, tasks.
_OBJECTS = "hubspot.crm.{object}.models"
_OBJECT_MODULES = {
    "contacts": "contacts",
    "deals": "deals",
    "tickets": "tickets",
    "tasks": "objects.tasks",
}
_OBJECT_TYPES = "(?P<object>contacts|deals|tickets|tasks)"
_SEGMENT = "[^/]+"
ROUTES = (
    Route(
        "GET",
        f"/crm/v3/properties/{_SEGMENT}",
        "hubspot.crm.properties.models",
        answers={200: "CollectionResponsePropertyNoPaging"},
    ),
    Route(
        "GET",
        f"/crm/v3/properties/{_SEGMENT}/{_SEGMENT}",
        "hubspot.crm.properties.models",
        answers={200: "ModelProperty"},
    ),
    Route(
        "GET",
        "/crm/v3/owners",
        "hubspot.crm.owners.models",
        answers={200: "CollectionResponsePublicOwnerForwardPaging"},
    ),
    Route(
        "POST",
        "/crm/v3/objects/contacts/gdpr-delete",
        "hubspot.crm.contacts.models",
        request="PublicGdprDeleteInput",
        answers={204: None},
    ),
    Route(
        "POST",
        f"/crm/v3/objects/{_OBJECT_TYPES}/batch/read",
        _OBJECTS,
        request="BatchReadInputSimplePublicObjectId",
        answers={
            200: "BatchResponseSimplePublicObject",
            207: "BatchResponseSimplePublicObjectWithErrors",
        },
    ),
    Route(
        "POST",
        f"/crm/v3/objects/{_OBJECT_TYPES}/search",
        _OBJECTS,
        request="PublicObjectSearchRequest",
        answers={200: "CollectionResponseWithTotalSimplePublicObjectForwardPaging"},
    ),
    Route(
        "POST",
        f"/crm/v3/objects/{_OBJECT_TYPES}/merge",
        _OBJECTS,
        request="PublicMergeInput",
        answers={200: "SimplePublicObject"},
    ),
    Route(
        "POST",
        f"/crm/v3/objects/{_OBJECT_TYPES}",
        _OBJECTS,
        request="SimplePublicObjectInputForCreate",
        answers={201: "SimplePublicObject"},
    ),
    Route(
        "GET",
        f"/crm/v3/objects/{_OBJECT_TYPES}",
        _OBJECTS,
        answers={200: "CollectionResponseSimplePublicObjectWithAssociationsForwardPaging"},
    ),
    Route(
        "GET",
        f"/crm/v3/objects/{_OBJECT_TYPES}/{_SEGMENT}",
        _OBJECTS,
        answers={200: "SimplePublicObjectWithAssociations"},
    ),
    Route(
        "PATCH",
        f"/crm/v3/objects/{_OBJECT_TYPES}/{_SEGMENT}",
        _OBJECTS,
        request="SimplePublicObjectInput",
        answers={200: "SimplePublicObject"},
    ),
    Route("DELETE", f"/crm/v3/objects/{_OBJECT_TYPES}/{_SEGMENT}", _OBJECTS, answers={204: None}),
    Route(
        "GET",
        f"/crm/v4/objects/{_SEGMENT}/{_SEGMENT}/associations/{_SEGMENT}",
        "hubspot.crm.associations.v4.models",
        answers={200: "CollectionResponseMultiAssociatedObjectWithLabelForwardPaging"},
    ),
)


def route(method: str, path: str) -> tuple[Route, str] | None:
    """The operation `method path` calls, and the module of its models."""
    for candidate in ROUTES:
        if (module := candidate.models(method, path)) is not None:
            return candidate, module
    return None
