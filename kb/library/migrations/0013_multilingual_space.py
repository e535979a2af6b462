# The multilingual space (issue 48): every chunk also embedded by multilingual-e5-small, with its own HNSW index.

import pgvector.django.indexes
import pgvector.django.vector
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('kb', '0012_document_worker'),
    ]

    operations = [
        migrations.AddField(
            model_name='document',
            name='multilingual_model',
            field=models.CharField(blank=True, default='', help_text='kb.text.multilingual.model_name(): empty, none', max_length=200),
        ),
        migrations.AddField(
            model_name='chunk',
            name='multilingual_embedding',
            field=pgvector.django.vector.VectorField(dimensions=384, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=pgvector.django.indexes.HnswIndex(ef_construction=64, fields=['multilingual_embedding'], m=16, name='kb_chunk_multilingual_hnsw', opclasses=['vector_cosine_ops']),
        ),
    ]
