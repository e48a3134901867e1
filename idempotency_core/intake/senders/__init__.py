"""Senders that speak their own format: how a provider's delivery becomes a submission.

A source's *profile* says how to read its deliveries (docs/senders.md):
`parsing` turns the raw body into a document, `verifying` checks the signature
or token over the raw body, `mapping` takes the submission id, contact and
message out of the document, and `profiles` holds the presets per provider.
Everything here is pure: no database, no network, so each piece is tested on
its own with the providers' own samples and independently computed vectors.
"""
