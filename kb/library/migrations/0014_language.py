# Language per document and per chunk, and full-text search in the chunk's language (issue 48).
# A generated column cannot be altered, so `search` is dropped and added again over the chunk's own text
# search configuration; search's per-access-list statistics read it and are rebuilt around this migration
# (search 0004 drops them before, search 0005 builds them again). Existing chunks keep 'english' until their
# documents are indexed again.

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

import kb.library.models


class Migration(migrations.Migration):

    dependencies = [
        ('kb', '0013_multilingual_space'),
    ]

    operations = [
        migrations.AddField(
            model_name='document',
            name='language',
            field=models.CharField(blank=True, db_index=True, help_text='ISO 639-1 code, e.g. en, de, pl, zh', max_length=8),
        ),
        migrations.AddField(
            model_name='document',
            name='language_detected',
            field=models.CharField(blank=True, help_text='What detection found at the last indexing', max_length=8),
        ),
        migrations.AddField(
            model_name='document',
            name='language_fixed',
            field=models.BooleanField(default=False, help_text='Set by an admin: re-indexing keeps it'),
        ),
        migrations.AddField(
            model_name='chunk',
            name='language',
            field=models.CharField(blank=True, max_length=8),
        ),
        migrations.AddField(
            model_name='chunk',
            name='search_config',
            field=kb.library.models.RegConfigField(default='english'),
        ),
        migrations.AddField(
            model_name='chunk',
            name='search_text',
            field=models.TextField(blank=True, default=''),
        ),
        migrations.RemoveIndex(model_name='chunk', name='kb_chunk_search_gin'),
        migrations.RemoveField(model_name='chunk', name='search'),
        migrations.AddField(
            model_name='chunk',
            name='search',
            field=models.GeneratedField(db_persist=True, expression=django.contrib.postgres.search.SearchVector(models.Case(models.When(search_text='', then=models.F('text')), default=models.F('search_text')), config=models.F('search_config')), output_field=django.contrib.postgres.search.SearchVectorField()),
        ),
        migrations.AddIndex(
            model_name='chunk',
            index=django.contrib.postgres.indexes.GinIndex(fields=['search'], name='kb_chunk_search_gin'),
        ),
    ]
