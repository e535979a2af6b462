"""The lab: measuring and fitting the product, never serving it.

Evaluation (`manage.py evaluate`), fitting the answer/refuse model (`manage.py calibrate`) and
their plots live here. Serving code (kb, accounts, search, chat) never imports this package
(an import-linter contract in pyproject.toml), so nothing here can reach a request, and the
packages only it needs (matplotlib) are the optional `lab` extra.
"""
