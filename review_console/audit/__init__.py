"""Audit: the trail of who did what, and its CSV export."""
