"""The confirmation's bytes: the direct writer agrees with the email package.

`plain_message_bytes` writes a plain message itself, because the email package
parses every header it is given (a fifth of a worker's CPU under load); every
other message is the email package's (`composed_message_bytes`). Pure logic, so
hypothesis checks here that wherever the direct writer answers, it writes
exactly the bytes the email package would, and that the usual confirmation is
one it answers for.
"""

from __future__ import annotations

import smtplib
import string
from datetime import UTC, timedelta, timezone
from email.utils import format_datetime

from hypothesis import example, given, settings
from hypothesis import strategies as st

from integrations.smtp.adapter import (
    composed_message_bytes,
    date_header,
    plain_message_bytes,
    quoted_address,
)

NAMES = ("From", "To", "Subject", "Date", "Message-ID", "X-Onefold-Operation")
USUAL = (
    ("From", "enquiries@onefold.invalid"),
    ("To", "ada.lovelace+quotes@example.com"),
    ("Subject", "We received your enquiry"),
    ("Date", "Mon, 30 Nov 2026 18:03:44 +0000"),
    ("Message-ID", "<opk_3f9a2c71b6d84e0f9a2c71b6d84e0f9a@onefold>"),
    ("X-Onefold-Operation", "opk_3f9a2c71b6d84e0f9a2c71b6d84e0f9a"),
)
USUAL_BODY = (
    "Hello Ada,\n\nThank you for your enquiry about a kitchen refit. We will be in\n"
    "touch within one working day.\n\nHarbour Builders\n"
)
# Printable ASCII and the characters a header or body could trip on: spaces, tabs,
# line ends, controls, encoded-word markers, non-ASCII.
ALPHABET = st.sampled_from(
    [*string.printable, "=?", "?=", "\x00", "\x7f", "é", "ß", "€", "\u2028", "  "]
)
VALUE = st.one_of(
    st.lists(ALPHABET, max_size=90).map("".join),
    st.sampled_from([value for _, value in USUAL]),  # each one plain, in every header
    st.sampled_from(
        [
            "a@b",
            "a..b@example.com",
            "Ada <ada@example.com>",
            "a@b, c@example.com",
            "Mon, 31 Feb 2026 10:00:00 +0000",
            "<a@b@onefold>",
            "<>",
            "a@example.com.",
        ]
    ),
)
BODY = st.lists(st.lists(ALPHABET, max_size=100).map("".join), max_size=6).map("\n".join)


def test_the_usual_confirmation_is_written_directly_as_the_email_package_writes_it():
    plain = plain_message_bytes(USUAL, USUAL_BODY)
    assert plain is not None
    assert plain == composed_message_bytes(USUAL, USUAL_BODY, utf8=False)


@settings(max_examples=3000, deadline=None)
@given(values=st.lists(VALUE, min_size=len(NAMES), max_size=len(NAMES)), body=BODY)
@example(values=[v for _, v in USUAL], body="")
@example(values=[v for _, v in USUAL], body="one line without an end")
@example(values=[v for _, v in USUAL], body="a\r\nb\rc\n\n")
@example(values=[v for _, v in USUAL], body="x" * 78 + "\n" + "y" * 79)
@example(values=[*(v for _, v in USUAL[:2]), "=?utf-8?q?hi?=", *(v for _, v in USUAL[3:])], body="")
def test_wherever_the_direct_writer_answers_it_writes_the_email_packages_bytes(values, body):
    headers = tuple(zip(NAMES, values, strict=True))
    plain = plain_message_bytes(headers, body)
    if plain is not None:
        assert plain == composed_message_bytes(headers, body, utf8=False)


@settings(max_examples=1000, deadline=None)
@given(
    subject=st.text(
        st.sampled_from(string.ascii_letters + string.digits + " .,!?'&-"), max_size=60
    ),
    body=st.lists(st.text(st.sampled_from(string.ascii_letters + " .,"), max_size=78)).map(
        "\n".join
    ),
)
def test_plain_subjects_and_bodies_are_written_directly_and_agree(subject, body):
    headers = (*USUAL[:2], ("Subject", subject), *USUAL[3:])
    plain = plain_message_bytes(headers, body)
    composed = composed_message_bytes(headers, body, utf8=False)
    if plain is not None:
        assert plain == composed
    # Single-spaced words with no space at either end are plain.
    if subject and subject == " ".join(subject.split()):
        assert plain is not None


@settings(max_examples=500, deadline=None)
@given(address=st.one_of(VALUE, st.from_regex(r"[A-Za-z0-9_+.\-]{1,20}@[A-Za-z0-9.\-]{1,20}")))
@example(address="ada.lovelace+quotes@example.com")
def test_an_address_quoted_directly_is_quoted_as_smtplib_quotes_it(address):
    quoted = quoted_address(address)
    if quoted is not None:
        assert quoted == smtplib.quoteaddr(address)
    if address == "ada.lovelace+quotes@example.com":
        assert quoted is not None


@settings(max_examples=500, deadline=None)
@given(
    moment=st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(0)), None])),
    offset=st.sampled_from([None, timedelta(hours=2), timedelta(minutes=-90)]),
)
def test_a_date_header_is_written_as_the_email_package_writes_it(moment, offset):
    if offset is not None:
        moment = moment.replace(tzinfo=timezone(offset))
    assert date_header(moment) == format_datetime(moment)
