"""A chunk is looked up by its document and stable id, never by the stable id alone; the document's own index is
the unique (document, ordinal) one's leading column."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('kb', '0016_compact_chunks'),
    ]

    operations = [
        migrations.AlterField(
            model_name='chunk',
            name='document',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='chunks', to='kb.document'),
        ),
        migrations.AlterField(
            model_name='chunk',
            name='stable_id',
            field=models.CharField(max_length=40),
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=models.Index(fields=['document', 'stable_id'], name='kb_chunk_document_stable'),
        ),
    ]
