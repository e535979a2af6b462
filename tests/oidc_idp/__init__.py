"""A real OpenID Connect provider for tests: django-oauth-toolkit in OIDC mode, its own process and SQLite."""
