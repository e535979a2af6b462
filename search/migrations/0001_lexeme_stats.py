"""Document frequencies of every lexeme, for IDF weighting of the lexical candidate list."""

from typing import Any

from django.db import migrations

# PostgreSQL 17+ builds and refreshes materialized views with a safe search_path
# (pg_catalog, pg_temp), so the table inside ts_stat's query string is schema-qualified.
CREATE = """
CREATE MATERIALIZED VIEW search_lexeme_stats AS
SELECT s.word, s.ndoc, t.total
FROM ts_stat('SELECT search FROM {schema}.kb_chunk') s
CROSS JOIN (SELECT count(*) AS total FROM {schema}.kb_chunk) t;
CREATE UNIQUE INDEX search_lexeme_stats_word ON search_lexeme_stats (word);
"""


def create(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT quote_ident(current_schema())")
        (schema,) = cursor.fetchone()
    schema_editor.execute(CREATE.format(schema=schema))


def drop(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP MATERIALIZED VIEW IF EXISTS search_lexeme_stats")


class Migration(migrations.Migration):
    dependencies = [("kb", "0001_initial")]
    operations = [migrations.RunPython(create, drop)]
