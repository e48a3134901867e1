"""`manage.py` commands: the sandbox destination."""
