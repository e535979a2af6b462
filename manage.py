#!/usr/bin/env python
"""Django's command-line utility; works on the embedded services when no URLs are set."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
    # A one-off command runs one thread: a connection pool only adds threads that retry an unreachable
    # server for KB_DB_POOL_TIMEOUT before the command may say which setting is wrong.
    os.environ.setdefault("KB_DB_POOL_SIZE", "0")
    from django.core.management import execute_from_command_line

    from kb.runtime.embedded import ensure_services

    try:
        ensure_services()  # before the settings, which only read where the servers are
        execute_from_command_line(sys.argv)
    except Exception as exc:
        from kb.runtime.preflight import explain

        message = explain(exc)
        if message is None:
            raise
        sys.stderr.write(f"error: {message}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
