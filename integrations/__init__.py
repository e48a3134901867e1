"""Destination adapters (CRM over HTTP, email over SMTP) and the sandbox destination."""
