"""The REST API: ingest for sources, status for their events."""
