"""Logging filters: what must never reach a log line, scrubbed on the way out.

The hook of a sender that cannot sign carries its token in the path
(`/hooks/NAME/t/<token>/`); Django's request logger writes the path of every
4xx and 5xx, so the token is replaced there, in every handler's records.
"""

from __future__ import annotations

import logging
import re

_HOOK_TOKEN = re.compile(r"(/hooks/[^/\s]+/t/)[^/\s]+")


class RedactSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _HOOK_TOKEN.sub(r"\1[token]", message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True
