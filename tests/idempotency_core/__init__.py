"""Tests of idempotency_core: a folder per sub-package, its top-level modules here."""
