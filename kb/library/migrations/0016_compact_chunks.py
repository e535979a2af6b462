"""Chunks in a quarter of the space (docs/measurements/storage.md): half-precision vectors, the late stage's
coarse word vectors (kb.text.pieces) without the piece ids, a trigram index over identifier-shaped tokens only."""

import django.contrib.postgres.indexes
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps
import pgvector.django.halfvec
import pgvector.django.indexes
from django.db import migrations, models

from kb.text.identifiers import searchable

BATCH = 2000


def fill_identifiers(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Each stored chunk's identifier-shaped tokens (the trigram index moves from the text to them)."""
    Chunk = apps.get_model("kb", "Chunk")
    last = 0
    while rows := list(Chunk.objects.filter(pk__gt=last).order_by("pk").values_list("pk", "text")[:BATCH]):
        Chunk.objects.bulk_update([Chunk(pk=pk, identifiers=searchable(text)) for pk, text in rows], ["identifiers"])
        last = rows[-1][0]


class Migration(migrations.Migration):

    dependencies = [
        ('kb', '0015_source_push'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='chunk',
            name='kb_chunk_embedding_hnsw',
        ),
        migrations.RemoveIndex(
            model_name='chunk',
            name='kb_chunk_text_trgm',
        ),
        migrations.RemoveIndex(
            model_name='chunk',
            name='kb_chunk_multilingual_hnsw',
        ),
        migrations.RemoveField(
            model_name='chunk',
            name='piece_ids',
        ),
        migrations.AddField(
            model_name='chunk',
            name='identifiers',
            field=models.TextField(blank=True, default='', editable=False),
        ),
        migrations.RunPython(fill_identifiers, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name='chunk',
            name='embedding',
            field=pgvector.django.halfvec.HalfVectorField(dimensions=384),
        ),
        migrations.AlterField(
            model_name='chunk',
            name='multilingual_embedding',
            field=pgvector.django.halfvec.HalfVectorField(dimensions=384, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=pgvector.django.indexes.HnswIndex(ef_construction=64, fields=['embedding'], m=16, name='kb_chunk_embedding_hnsw', opclasses=['halfvec_cosine_ops']),
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=pgvector.django.indexes.HnswIndex(ef_construction=64, fields=['multilingual_embedding'], m=16, name='kb_chunk_multilingual_hnsw', opclasses=['halfvec_cosine_ops']),
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=django.contrib.postgres.indexes.GinIndex(fields=['identifiers'], name='kb_chunk_identifiers_trgm', opclasses=['gin_trgm_ops']),
        ),
    ]
