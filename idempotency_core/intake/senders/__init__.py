"""Senders that speak their own format: how a provider's delivery becomes a submission."""
