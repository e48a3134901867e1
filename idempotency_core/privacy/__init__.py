"""A person's requests about their data (GDPR articles 15 and 17): what Onefold holds
about one email address, exported as one document, and erased from every table that
holds it, keeping keys, fingerprints, statuses and decisions (docs/operations.md,
"Personal data requests")."""
