# The asker's reason chip with a thumbs down (issue 49): a column with a constant default, no table rewrite.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chat', '0010_message_contentgaps_permission'),
    ]

    operations = [
        migrations.AddField(
            model_name='judgement',
            name='reason',
            field=models.CharField(blank=True, choices=[('off_topic', "Doesn't answer my question"), ('wrong_or_outdated', 'Wrong or outdated'), ('should_refuse', "Should have said it doesn't know"), ('should_answer', 'The documents do answer this')], default='', help_text="The asker's reason chip with a thumbs down; empty for any other verdict", max_length=20),
        ),
    ]
