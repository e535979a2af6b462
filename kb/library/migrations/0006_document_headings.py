"""Document.headings: the viewer's headings, located once at ingest. Documents indexed
before this migration get theirs here, from their stored canonical text, so the viewer
never has to locate them per request."""

from typing import Any

from django.db import migrations, models

BATCH = 200


def locate_stored_headings(apps: Any, schema_editor: Any) -> None:
    from kb.library.ingest import headings

    document_model = apps.get_model("kb", "Document")
    rows = document_model.objects.exclude(canonical_text="").only("pk", "canonical_text", "mime_type")
    batch = []
    for document in rows.iterator(chunk_size=BATCH):
        found = headings.locate(text=document.canonical_text, mime=document.mime_type)
        document.headings = headings.stored(found)
        batch.append(document)
        if len(batch) == BATCH:
            document_model.objects.bulk_update(batch, ["headings"])
            batch = []
    document_model.objects.bulk_update(batch, ["headings"])


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0005_ingest_stage_seconds"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="headings",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="The headings the document page shows, located at ingest (kb.library.ingest.headings)",
            ),
        ),
        migrations.RunPython(locate_stored_headings, migrations.RunPython.noop, elidable=True),
    ]
