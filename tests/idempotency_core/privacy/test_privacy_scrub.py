"""How an erasure finds what a person sent in free text: as written, as JSON, URLs and
HTML carry it, whatever the case; short values only as whole words; keys only when
they are the person's long values (an address counted by recipient)."""

from __future__ import annotations

from idempotency_core.privacy.scrub import ERASED, Scrubber

SCRUB = Scrubber(["ada.quill@example.org", "+44 20 7946 0123", "yes"], words=["Ada"])


def test_values_are_found_however_they_were_quoted() -> None:
    for quoted in (
        "Contact already exists: ADA.QUILL@example.org",
        "email=ada.quill%40example.org",
        "phone 442079460123 refused",
        '{"phone": "+44 20 7946 0123"}',
    ):
        assert ERASED in SCRUB.text(quoted), quoted
        assert "ada.quill" not in SCRUB.text(quoted).lower()


def test_short_values_and_name_parts_only_as_whole_words() -> None:
    assert (
        SCRUB.text("Ada said yes yesterday to Adam") == f"{ERASED} said {ERASED} yesterday to Adam"
    )


def test_json_keys_only_by_long_values() -> None:
    evidence = {"yes": "yes", "by_recipient": {"ada.quill@example.org": 2}, "ids": [1, 2]}
    assert SCRUB.value(evidence) == {
        "yes": ERASED,
        "by_recipient": {ERASED: 2},
        "ids": [1, 2],
    }
