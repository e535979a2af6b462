"""The per-access-list statistics read kb_chunk.search, which kb 0014 drops and adds again (a generated
column cannot be altered): they are dropped before it and built again after it (0005)."""

from typing import Any

from django.db import migrations


def drop(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP MATERIALIZED VIEW IF EXISTS search_acl_chunk_totals")
    schema_editor.execute("DROP MATERIALIZED VIEW IF EXISTS search_acl_lexeme_stats")


def create(apps: Any, schema_editor: Any) -> None:
    from importlib import import_module

    import_module("search.migrations.0003_readable_lexeme_stats").create(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("search", "0003_readable_lexeme_stats")]
    run_before = [("kb", "0014_language")]
    operations = [migrations.RunPython(drop, create)]
