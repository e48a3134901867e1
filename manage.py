#!/usr/bin/env python
"""Django's command-line utility for Onefold."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # Settings refuse bad values when first read (an engine other than PostgreSQL,
        # a malformed number): one line naming the setting, not a traceback that ends
        # in "Unknown command".
        sys.exit(f"Onefold cannot start: {exc}")


if __name__ == "__main__":
    main()
