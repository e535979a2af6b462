"""Retrieval inside permissions."""
