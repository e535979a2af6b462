"""Ingestion stages: extract, chunk, classify, embed, index."""
