"""Submissions: search and a submission's page, everything that happened to it."""
