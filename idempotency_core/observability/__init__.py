"""What an operator watches in production (docs/operations.md).

`figures`: Onefold's own figures, read from the database when asked for;
`metrics`: /metrics, those figures and the web layer's (django-prometheus) in
Prometheus text behind a token or an allowed network; `health`: /healthz and
/readyz; `logcontext`: the ids a worker's JSON log lines carry. `manage.py
status` prints the same figures as /metrics.

Above execution, audit and models in the layers of pyproject.toml, beside the
proofs: it reads what the services write and changes nothing.
"""
