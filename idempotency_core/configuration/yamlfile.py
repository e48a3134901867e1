"""The configuration as a YAML file: read with the line of every key and value, written
back for people who keep it in git.
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

    values: dict[Path, yaml.Node] = field(default_factory=dict)
    keys: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        node = self.values.get(path)
        if node is not None:
            return int(node.start_mark.line) + 1
        return self.key_line_of(path)

    def key_line_of(self, path: Path) -> int | None:
        return self.keys.get(path)

    def template_line(self, path: Path, line: int) -> int | None:
        """A literal or folded block (`|`, `>`) starts on the line after its indicator;
        any other scalar at its own first line."""
        node = self.values.get(path)
        if node is None:
            return self.key_line_of(path)
        first = int(node.start_mark.line) + 1
        if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
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
    file does not take (module docstring)."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlFileError(Problem((), "larger than 1 MiB: split it, or remove what is unused"))
    try:
        shape = _shape_problem(text)
        if shape is not None:
            raise YamlFileError(shape)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            marks = FileMarks()
            problems: list[Problem] = []
            if node is None:
                return None, marks, problems
            return _built(node, (), loader, marks, problems), marks, problems
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else None
        said = str(exc.problem or exc)
        if "nesting depth" in said:  # libyaml's own limit, met before MAX_DEPTH is counted
            said = f"nested too deep (more than {MAX_DEPTH} levels)"
        raise YamlFileError(Problem((), f"not YAML: {said}", line)) from exc
    except (yaml.YAMLError, ValueError) as exc:
        raise YamlFileError(Problem((), f"not YAML: {exc}")) from exc


_NO_ALIASES = "anchors and aliases are not accepted (write each value out)"
_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _shape_problem(text: str) -> Problem | None:
    """An anchor, an alias, a tag or nesting deeper than MAX_DEPTH, with its line."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        line = int(event.start_mark.line) + 1 if event.start_mark is not None else None
        anchor, tag = getattr(event, "anchor", None), getattr(event, "tag", None)
        if isinstance(event, yaml.AliasEvent):
            return Problem((), f"an alias (*{anchor}): {_NO_ALIASES}", line)
        if anchor:
            return Problem((), f"an anchor (&{anchor}): {_NO_ALIASES}", line)
        if tag and not _implicit(event):
            return Problem((), f"a tag ({tag}): tags are not accepted", line)
        if isinstance(event, _OPENS):
            depth += 1
            if depth > MAX_DEPTH:
                return Problem((), f"nested too deep (more than {MAX_DEPTH} levels)", line)
        elif isinstance(event, _CLOSES):
            depth -= 1
    return None


def _implicit(event: yaml.Event) -> bool:
    """A tag YAML gives by itself (a plain scalar's), not one written in the file."""
    implicit = getattr(event, "implicit", False)
    return bool(implicit[0] if isinstance(implicit, tuple) else implicit)


def _built(
    node: yaml.Node, path: Path, loader: Any, marks: FileMarks, problems: list[Problem]
) -> Any:
    marks.values[path] = node
    if isinstance(node, yaml.MappingNode):
        built: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            line = int(key_node.start_mark.line) + 1
            if key is None:
                problems.append(Problem(path, "a key must be a plain name", line))
                continue
            if key in built:
                problems.append(Problem((*path, key), f"key {key!r} given twice", line))
            marks.keys[(*path, key)] = line
            built[key] = _built(value_node, (*path, key), loader, marks, problems)
        return built
    if isinstance(node, yaml.SequenceNode):
        return [
            _built(item, (*path, number), loader, marks, problems)
            for number, item in enumerate(node.value)
        ]
    return loader.construct_object(node, deep=True)


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
