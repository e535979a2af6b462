"""The dev runtime: embedded PostgreSQL and Redis (embedded), the `make run` launcher and the
lifeline that stops what it started, and the preflight checks that explain a missing service."""
