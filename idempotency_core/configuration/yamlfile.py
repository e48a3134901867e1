"""The configuration as a YAML file: read with the line of every key and value, written
back for people who keep it in git.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from idempotency_core.configuration.document import Path, Problem


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
    (a key given twice). Raises YamlFileError when `text` is not YAML."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = int(mark.line) + 1 if mark is not None else None
        raise YamlFileError(Problem((), f"not YAML: {exc.problem or exc}", line)) from exc
    except yaml.YAMLError as exc:
        raise YamlFileError(Problem((), f"not YAML: {exc}")) from exc
    finally:
        loader.dispose()
    marks = FileMarks()
    problems: list[Problem] = []
    if node is None:
        return None, marks, problems
    return _built(node, (), loader, marks, problems), marks, problems


def _built(
    node: yaml.Node, path: Path, loader: yaml.SafeLoader, marks: FileMarks, problems: list[Problem]
) -> Any:
    marks.values[path] = node
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # merge keys (`<<: *defaults`)
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
