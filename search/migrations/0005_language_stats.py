"""The per-access-list statistics again, now per text search configuration too (kb 0014): a word's document
frequency is counted among the chunks read with the configuration the question's word is analysed with (a
lexeme of one language's stemmer means nothing in another's), and the chunk totals per language, from which a
search reads which languages the asker's chunks are in (search.retrieval, kb.text.language). Every chunk has
one access list and one language, so the sum over the rows whose list overlaps a user's principals is still
the number of chunks they may read. The total stays the whole readable corpus's: a language of a few chunks
would otherwise have every word it uses counted as too common to select candidates."""

from typing import Any

from django.db import migrations

CREATE = """
CREATE MATERIALIZED VIEW search_acl_lexeme_stats AS
SELECT c.acl, c.acl::text AS acl_key, c.search_config AS config, l.word, count(*)::integer AS ndoc
FROM {schema}.kb_chunk c CROSS JOIN LATERAL unnest(tsvector_to_array(c.search)) AS l(word)
GROUP BY c.acl, c.search_config, l.word;
CREATE UNIQUE INDEX search_acl_lexeme_stats_word ON search_acl_lexeme_stats (word, config, acl_key);
CREATE MATERIALIZED VIEW search_acl_chunk_totals AS
SELECT c.acl, c.acl::text AS acl_key, c.language, count(*)::integer AS total
FROM {schema}.kb_chunk c GROUP BY c.acl, c.language;
CREATE UNIQUE INDEX search_acl_chunk_totals_acl ON search_acl_chunk_totals (acl_key, language);
"""


def create(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT quote_ident(current_schema())")
        (schema,) = cursor.fetchone()
    schema_editor.execute(CREATE.format(schema=schema))


def drop(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP MATERIALIZED VIEW IF EXISTS search_acl_chunk_totals")
    schema_editor.execute("DROP MATERIALIZED VIEW IF EXISTS search_acl_lexeme_stats")


class Migration(migrations.Migration):
    dependencies = [("search", "0004_before_language"), ("kb", "0014_language")]
    operations = [migrations.RunPython(create, drop)]
