"""Management commands of the integrations app."""
