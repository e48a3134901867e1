"""Tests of the settings and the project's own parts in config/ (deploy, PostgreSQL backend)."""
