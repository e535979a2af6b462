"""The chat tests' small corpus, for the drills that ask questions."""

from tests.chat.conftest import corpus  # noqa: F401  (a fixture, used by name)
