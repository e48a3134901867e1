"""Onefold's core: models, ingest, the engine (claim, execute, classify, recover, sweep)."""
