"""A confirmation greets by name only when the name is short plain text.

Pure tests of `greeting_name`: no database, no network. The end-to-end check (a
spammer's text never reaching the SMTP sink) is in test_confirmation_limits.py.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idempotency_core.execution.confirmations import (
    GREETING_NAME_MAX,
    confirmation_greeting,
    greeting_name,
)

SHOWN = [
    "Ada",
    "Ada Lovelace",
    "Jean-Luc Picard",
    "O'Brien",
    "Youssou N\u2019Dour",
    "J. R. R. Tolkien",
    "J.R.R. Tolkien",
    "St. John Smith",
    "José Núñez",
    unicodedata.normalize("NFD", "Zoë Renée"),  # accents as combining marks
    "李小龍",
    "Ólafur Arnalds",
    "Мария Иванова",
]

NEUTRAL = [
    "Claim your prize at https://evil.example/win",
    "Hello from evil.com",
    "www evil",
    "bit.ly",
    "ada@example.com",
    "mailto:ada",
    "<b>Ada</b>",
    "Ada &amp; Bob",
    "Ada\nClick here",
    "Ada\r\nBcc: x",
    "Ada\tLovelace",
    "Agent 007",
    "Call +44 20 7946 0000",
    "A" * (GREETING_NAME_MAX + 1),
    "",
    "   ",
    "...",
    "'-",
    "\u202eAda",  # right-to-left override: reverses what follows on screen
    "Ada\u200b",  # zero-width space
    "Ada\u00a0Lovelace",  # no-break space: not a plain space
    "Dr.No",  # a dot then letters reads as a domain: neutral is the safe side
]


@pytest.mark.parametrize("name", SHOWN)
def test_a_plain_name_is_shown(name):
    assert greeting_name(name) == name
    assert confirmation_greeting(name) == f"Hello {name},"


@pytest.mark.parametrize("name", NEUTRAL)
def test_anything_else_gets_the_neutral_greeting(name):
    assert greeting_name(name) == ""
    assert confirmation_greeting(name) == "Hello,"


@pytest.mark.parametrize("value", [None, 42, ["Ada"], {"name": "Ada"}])
def test_a_name_that_is_not_text_gets_the_neutral_greeting(value):
    assert confirmation_greeting(value) == "Hello,"


def test_runs_of_spaces_collapse():
    assert greeting_name("  Ada   Lovelace ") == "Ada Lovelace"


@given(st.text(max_size=200))
def test_whatever_is_shown_is_short_plain_text_without_links(name):
    shown = greeting_name(name)
    if not shown:
        return
    assert len(shown) <= GREETING_NAME_MAX
    assert any(c.isalpha() for c in shown)
    for forbidden in ("://", "@", "www", "<", ">", "/", ":", "&", "\n", "\r", "\t"):
        assert forbidden not in shown.casefold()
    assert not any(c.isdigit() for c in shown)
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in shown)
    assert greeting_name(shown) == shown  # what is shown would be shown again


_SCHEMES = st.sampled_from(["http://", "https://", "HTTPS://", "www.", "ftp://", "mailto:"])
_HOSTS = st.from_regex(r"[a-z]{2,12}\.(com|net|example|ly|ru)", fullmatch=True)


@given(st.text(max_size=30), _SCHEMES, _HOSTS, st.text(max_size=20))
def test_a_name_carrying_a_link_is_never_shown(before, scheme, host, after):
    assert greeting_name(f"{before}{scheme}{host}{after}") == ""
    assert greeting_name(f"{before} {host} {after}") == ""


_WORDS = st.text(
    alphabet=st.characters(categories=["Lu", "Ll", "Lo"]), min_size=1, max_size=12
).filter(lambda word: "www" not in word.casefold())


@given(st.lists(_WORDS, min_size=1, max_size=4))
def test_words_of_letters_are_shown_as_written(words):
    name = " ".join(words)
    if len(name) <= GREETING_NAME_MAX and "www" not in name.casefold():
        assert greeting_name(name) == name


def _greeting_by_character(name: str, *, markup: bool) -> str:
    """`greeting_name` as the rule reads, one character at a time (its ASCII names are
    tested by expressions instead)."""
    shown = " ".join(part for part in name.split(" ") if part)
    if not shown or len(shown) > GREETING_NAME_MAX:
        return ""

    def allowed(c: str) -> bool:
        plain = c == " " or c in "-\u2010'\u2019." or c.isalpha()
        plain = plain or unicodedata.category(c) in ("Mn", "Mc")
        return plain or (markup and c in '<>&"/')

    if not all(allowed(c) for c in shown) or not any(c.isalpha() for c in shown):
        return ""
    folded = shown.casefold()
    if "www" in folded:
        return ""
    for position, character in enumerate(folded[:-2]):
        if character == "." and folded[position + 1].isalpha() and folded[position + 2].isalpha():
            return ""
    return shown


@given(
    name=st.one_of(
        st.text(st.characters(max_codepoint=127), max_size=70),
        st.text(st.sampled_from("Ab .-'"), max_size=20),
        st.text(st.sampled_from("Ab .-'<>&\"/1"), max_size=20),
        st.text(st.sampled_from("Ab .-'<>&\"/1\u2019é\u0301"), max_size=20),
        st.sampled_from(SHOWN + NEUTRAL),
    ),
    markup=st.booleans(),
)
def test_every_name_is_judged_as_by_each_character(name, markup):
    assert greeting_name(name, markup=markup) == _greeting_by_character(name, markup=markup)
