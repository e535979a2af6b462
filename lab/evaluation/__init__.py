"""Retrieval and answer evaluation: `manage.py evaluate` on a set in the evaluation-set layout of docs/EVALUATION.md."""
