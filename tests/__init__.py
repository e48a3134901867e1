"""Onefold test suite, by capability."""
