"""Tests of the core: ingest, engine, sweeper, policy."""
