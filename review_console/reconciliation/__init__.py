"""Reconciliation: the runs that compare the CRM with what was sent."""
