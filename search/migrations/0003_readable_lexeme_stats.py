"""Document frequencies per access list, so that a user's word statistics count only the chunks they may read.

Every chunk carries exactly one `acl`, and a user reads a chunk when its `acl` overlaps their principals; so
a lexeme's count over the chunks a user may read is the sum of its counts over the access lists that overlap
their principals (search.stats.readable_ndoc_sql). A deployment has few distinct access lists, so a lexeme
has few rows here, and adding or removing a restricted document moves none of an outsider's sums.
`acl_key` (the list as text) keys the unique indexes REFRESH ... CONCURRENTLY needs: with the array itself
in the index, PostgreSQL's refresh fails ("cannot determine element type of anyarray argument").
"""

from typing import Any

from django.db import migrations

CREATE = """
CREATE MATERIALIZED VIEW search_acl_lexeme_stats AS
SELECT c.acl, c.acl::text AS acl_key, l.word, count(*)::integer AS ndoc
FROM {schema}.kb_chunk c CROSS JOIN LATERAL unnest(tsvector_to_array(c.search)) AS l(word)
GROUP BY c.acl, l.word;
CREATE UNIQUE INDEX search_acl_lexeme_stats_word ON search_acl_lexeme_stats (word, acl_key);
CREATE MATERIALIZED VIEW search_acl_chunk_totals AS
SELECT c.acl, c.acl::text AS acl_key, count(*)::integer AS total FROM {schema}.kb_chunk c GROUP BY c.acl;
CREATE UNIQUE INDEX search_acl_chunk_totals_acl ON search_acl_chunk_totals (acl_key);
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
    dependencies = [("search", "0002_answerability_models"), ("kb", "0001_initial")]
    operations = [migrations.RunPython(create, drop)]
