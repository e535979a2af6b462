# The content-gaps permission declared on the model (chat 0009 created the row; this keeps it after a flush).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0009_contentgaps_permission'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='message',
            options={'ordering': ['conversation_id', 'pk'], 'permissions': [('view_contentgaps', 'Can view content gaps')]},
        ),
    ]
