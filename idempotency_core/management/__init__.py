"""Management commands of the core."""
