"""The configuration as a YAML file: read with the line of every key and value, written
back for people who keep it in git. Reading it is bounded whatever the input: at most
1 MiB, 32 levels deep, no anchors, aliases or tags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from idempotency_core.configuration.document import Path, Problem

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 32
# libyaml's parser and composer when built in (a file read in a fraction of the time).
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class FileMarks:
    """Where each value of a document read from a file is (document.Marks)."""

    # The line of each value (1 on), and a scalar's style ("|", ">", quotes or None).
    values: dict[Path, tuple[int, str | None]] = field(default_factory=dict)
    keys: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        found = self.values.get(path)
        if found is not None:
            return found[0]
        return self.key_line_of(path)

    def key_line_of(self, path: Path) -> int | None:
        return self.keys.get(path)

    def template_line(self, path: Path, line: int) -> int | None:
        """A literal or folded block (`|`, `>`) starts on the line after its indicator;
        any other scalar at its own first line."""
        found = self.values.get(path)
        if found is None:
            return self.key_line_of(path)
        first, style = found
        if style in ("|", ">"):
            return first + line
        return first + line - 1


class YamlFileError(Exception):
    """The file is not YAML at all: nothing of it could be read."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def yaml_load(text: str) -> tuple[Any, FileMarks, list[Problem]]:
    """The document in `text`, where its values are, and what reading it found wrong
    (a key given twice). Raises YamlFileError when `text` is not YAML, or is YAML this
    file does not take: over MAX_BYTES, nested deeper than MAX_DEPTH, with an anchor,
    an alias (a few hundred bytes of them expand to gigabytes) or a tag."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlFileError(Problem((), "larger than 1 MiB: split it, or remove what is unused"))
    reader = _Reader(text)
    try:
        document = reader.document()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else None
        said = str(exc.problem or exc)
        if "nesting depth" in said:  # libyaml's own limit, met before MAX_DEPTH is counted
            said = f"nested too deep (more than {MAX_DEPTH} levels)"
        raise YamlFileError(Problem((), f"not YAML: {said}", line)) from exc
    except (yaml.YAMLError, ValueError) as exc:
        raise YamlFileError(Problem((), f"not YAML: {exc}")) from exc
    return document, reader.marks, reader.problems


_NO_ALIASES = "anchors and aliases are not accepted (write each value out)"
_STR = "tag:yaml.org,2002:str"


class _Reader:
    """The document built from libyaml's events in one pass, with the line of each
    value: no node tree (building one, then the document from it, took seconds for a
    file of 1 MiB), and every anchor, alias, tag or level too deep refused as it comes."""

    def __init__(self, text: str) -> None:
        self.events = iter(yaml.parse(text, Loader=_Loader))
        self.marks = FileMarks()
        self.problems: list[Problem] = []
        self.depth = 0
        # Plain scalars are typed as YAML's safe loader types them (numbers, booleans).
        self.loader = yaml.SafeLoader("")

    def document(self) -> Any:
        value = None
        for event in self.events:
            if isinstance(event, yaml.DocumentStartEvent):
                if self.marks.values:
                    raise YamlFileError(
                        Problem((), "not YAML: more than one document", _line(event))
                    )
                value = self.value(next(self.events), ())
        return value

    def value(self, event: yaml.Event, path: Path) -> Any:
        _refuse_special(event)
        line = _line(event)
        if isinstance(event, yaml.ScalarEvent):
            self.marks.values[path] = (line, event.style)
            return self.scalar(event)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise YamlFileError(
                Problem((), f"nested too deep (more than {MAX_DEPTH} levels)", line)
            )
        self.marks.values[path] = (line, None)
        built: Any = self.mapping(path) if isinstance(event, yaml.MappingStartEvent) else []
        if isinstance(event, yaml.SequenceStartEvent):
            for item in self.events:
                if isinstance(item, yaml.SequenceEndEvent):
                    break
                built.append(self.value(item, (*path, len(built))))
        self.depth -= 1
        return built

    def mapping(self, path: Path) -> dict[str, Any]:
        built: dict[str, Any] = {}
        for event in self.events:
            if isinstance(event, yaml.MappingEndEvent):
                return built
            _refuse_special(event)
            line = _line(event)
            if not isinstance(event, yaml.ScalarEvent):
                self.problems.append(Problem(path, "a key must be a plain name", line))
                self.value(event, (*path, "?"))  # read, and left out
                self.value(next(self.events), (*path, "?"))
                continue
            key = str(event.value)
            if key in built:
                self.problems.append(Problem((*path, key), f"key {key!r} given twice", line))
            self.marks.keys[(*path, key)] = line
            built[key] = self.value(next(self.events), (*path, key))
        return built

    def scalar(self, event: yaml.ScalarEvent) -> Any:
        tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
        if tag == _STR:
            return event.value
        node = yaml.ScalarNode(tag, event.value, None, None, event.style)
        return self.loader.construct_object(node, deep=True)


def _line(event: yaml.Event) -> int:
    return int(event.start_mark.line) + 1 if event.start_mark is not None else 1


def _refuse_special(event: yaml.Event) -> None:
    anchor, tag = getattr(event, "anchor", None), getattr(event, "tag", None)
    if isinstance(event, yaml.AliasEvent):
        raise YamlFileError(Problem((), f"an alias (*{anchor}): {_NO_ALIASES}", _line(event)))
    if anchor:
        raise YamlFileError(Problem((), f"an anchor (&{anchor}): {_NO_ALIASES}", _line(event)))
    if tag:
        raise YamlFileError(Problem((), f"a tag ({tag}): tags are not accepted", _line(event)))


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the document's order, multi-line text as `|` blocks."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def yaml_dump(document: Mapping[str, Any]) -> str:
    """`document` as the YAML file `yaml_load` reads back to the same document."""
    return yaml.dump(
        dict(document),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
