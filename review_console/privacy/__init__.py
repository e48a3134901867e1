"""Privacy: a person's data exported or erased on request."""
