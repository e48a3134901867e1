"""The strict JSON reader's quick path (no string checked when the text can hold no
NUL or lone surrogate; no depth scan when it has too few brackets to be too deep)
decides every text as the careful path does: the same value, or the same refusal."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from idempotency_core.intake import strictjson

_keys = st.text(st.sampled_from("ab\x00\ud800é"), max_size=2)
_strings = st.text(st.characters(categories=["Cs", "Cc", "Ll", "So"]), max_size=6)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), _strings)


def _written(value: Any, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


@st.composite
def _texts(draw: st.DrawFn, depth: int = 0) -> str:
    """JSON texts, objects written pair by pair so that a key may appear twice, strings
    raw or escaped, with NUL and lone surrogates among their characters."""
    ascii_only = draw(st.booleans())
    if depth >= 3 or draw(st.booleans()):
        return _written(draw(_scalars), ascii_only)
    items = draw(st.lists(_texts(depth + 1), max_size=3))
    if draw(st.booleans()):
        return "[" + ",".join(items) + "]"
    keys = draw(st.lists(_keys, min_size=len(items), max_size=len(items)))
    pairs = (f"{_written(k, ascii_only)}:{v}" for k, v in zip(keys, items, strict=True))
    return "{" + ",".join(pairs) + "}"


def _outcome(read: Any) -> tuple[str, Any]:
    try:
        return "value", read()
    except strictjson.StrictJSONError as exc:
        return "refused", str(exc)


def _careful(text: str, max_depth: int) -> Any:
    strictjson._check_depth(text, max_depth)
    return strictjson._decoded(text, strictjson.MAX_NUMBER_LENGTH, careful=True)


@settings(max_examples=1000, deadline=None)
@given(text=_texts(), max_depth=st.integers(1, 4))
def test_the_quick_path_decides_as_the_careful_one(text, max_depth):
    expected = _outcome(lambda: _careful(text, max_depth))
    assert _outcome(lambda: strictjson.loads(text, max_depth=max_depth)) == expected
    try:
        data = text.encode()
    except UnicodeEncodeError:
        return  # a raw lone surrogate is not UTF-8: only a str can carry it
    assert _outcome(lambda: strictjson.loads(data, max_depth=max_depth)) == expected


def test_a_repeated_key_is_refused_on_the_quick_path_too():
    text = '{"a": 1, "b": {"c": 2, "c": 3}}'
    assert "\\u" not in text
    try:
        strictjson.loads(text)
    except strictjson.StrictJSONError as exc:
        assert str(exc) == "The key 'c' appears twice in one object."
    else:
        raise AssertionError("a repeated key was accepted")
