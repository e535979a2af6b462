"""The app's settings with tests/web/crash_urls.py as its URLs, for a Daphne whose views fail on purpose."""

from kb.settings import *  # noqa: F403

ROOT_URLCONF = "tests.web.crash_urls"
