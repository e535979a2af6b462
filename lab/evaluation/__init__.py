"""Retrieval and answer evaluation: `manage.py evaluate` on a set in the ../shared/eval layout (docs/EVALUATION.md)."""
