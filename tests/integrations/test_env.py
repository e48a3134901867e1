"""The adapters' settings reader (integrations/env.py): one meaning for a setting in
every vendor, and problems that name the variable, never its value."""

from __future__ import annotations

import pytest

from integrations.env import AdapterSettings, SettingError


def test_the_destinations_base_url_wins_over_the_vendors_url_variable() -> None:
    env = {"ACME_BASE_URL": "https://from-env.example/", "ACME_TOKEN": "t"}
    read = AdapterSettings(env, base_url="http://own.example/", url_variable="ACME_BASE_URL")
    assert read.url("ACME_BASE_URL", "https://api.acme.example") == "http://own.example"
    assert read.missing(["ACME_BASE_URL", "ACME_TOKEN"]) == []
    unset = AdapterSettings(env, base_url=None, url_variable="ACME_BASE_URL")
    assert unset.url("ACME_BASE_URL") == "https://from-env.example"
    assert AdapterSettings({}).url("ACME_BASE_URL", "https://api.acme.example/") == (
        "https://api.acme.example"
    )


def test_an_empty_or_blank_variable_takes_the_default_unless_empty_means_none() -> None:
    read = AdapterSettings({"A": "", "B": "  ", "C": " value\n"})
    assert (read.get("A", "dflt"), read.get("B", "dflt"), read.get("C", "dflt")) == (
        "dflt",
        "dflt",
        "value",
    )
    assert read.get("A", "dflt", keep_empty=True) == ""
    assert read.get("UNSET", "dflt", keep_empty=True) == "dflt"


def test_missing_names_the_unset_credentials_in_the_order_asked() -> None:
    read = AdapterSettings({"ID": "x", "SECRET": " "})
    assert read.missing(["URL", "ID", "SECRET", "TOKEN_URL"]) == ["URL", "SECRET", "TOKEN_URL"]


def test_a_choice_outside_the_allowed_names_the_variable_and_not_the_value() -> None:
    read = AdapterSettings({"OBJECT": "s3cr3t-looking"})
    with pytest.raises(SettingError) as refused:
        read.choice("OBJECT", ("Lead", "Contact"), "Lead")
    assert str(refused.value) == "OBJECT must be Lead or Contact"
    assert AdapterSettings({}).choice("OBJECT", ("Lead", "Contact"), "Lead") == "Lead"
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize("raw", ["soon", "nan", "inf", "-1"])
def test_seconds_refuses_what_is_not_a_finite_number_at_or_above_the_minimum(raw: str) -> None:
    with pytest.raises(SettingError, match=r"^WAIT must be a number of seconds, 0 or more$"):
        AdapterSettings({"WAIT": raw}).seconds("WAIT", 2.0, minimum=0)


def test_seconds_reads_a_number_and_without_a_minimum_a_negative_one() -> None:
    assert AdapterSettings({}).seconds("WAIT", 2.0, minimum=0) == 2.0
    assert AdapterSettings({"WAIT": "0.5"}).seconds("WAIT", 2.0, minimum=0) == 0.5
    assert AdapterSettings({"WAIT": "-3"}).seconds("WAIT", 2.0) == -3.0
    with pytest.raises(SettingError, match=r"^WAIT must be a number of seconds$"):
        AdapterSettings({"WAIT": "x"}).seconds("WAIT", 2.0)


def test_a_time_zone_is_an_iana_name_and_utc_when_unset() -> None:
    assert AdapterSettings({}).time_zone("ZONE") == "UTC"
    assert AdapterSettings({"ZONE": " Europe/Berlin "}).time_zone("ZONE") == "Europe/Berlin"
    for bad in ("Mars/Base", "../etc/passwd"):
        with pytest.raises(SettingError, match="ZONE must be an IANA time zone"):
            AdapterSettings({"ZONE": bad}).time_zone("ZONE")
