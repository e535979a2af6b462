"""The text model: tokenizer, encoders, embeddings, word pieces, the question's intent, languages and
sentences. Ingestion, search and chat all read text through it, so search and chat never import
ingestion (pyproject.toml's import contracts)."""
