"""Tests of the business configuration: its document, templates, versions and file."""
