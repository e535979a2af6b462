import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0001_initial"),
    ]

    operations = [
        # Tokens issued before scopes existed could search and ask, nothing else: they keep exactly that.
        migrations.AddField(
            model_name="apitoken",
            name="scopes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(
                    choices=[
                        ("search", "Search passages"),
                        ("ask", "Ask questions, read and review conversations"),
                        ("documents:read", "List and read documents and folders"),
                        ("documents:write", "Upload, re-index, change access, delete"),
                    ],
                    max_length=32,
                ),
                blank=True,
                default=["search", "ask"],
                size=None,
            ),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="apitoken",
            name="scopes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(
                    choices=[
                        ("search", "Search passages"),
                        ("ask", "Ask questions, read and review conversations"),
                        ("documents:read", "List and read documents and folders"),
                        ("documents:write", "Upload, re-index, change access, delete"),
                    ],
                    max_length=32,
                ),
                blank=True,
                default=list,
                size=None,
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, help_text="Empty: never expires", null=True),
        ),
    ]
