import django.contrib.postgres.fields
from django.db import migrations, models


def keep_what_old_tokens_could_do(apps, schema_editor):
    # Tokens issued before scopes existed could search and ask, nothing else: they keep exactly that.
    apps.get_model("accounts", "ApiToken").objects.update(scopes=["search", "ask"])


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0001_initial"),
    ]

    operations = [
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
                default=list,
                size=None,
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, help_text="Empty: never expires", null=True),
        ),
        migrations.RunPython(keep_what_old_tokens_could_do, migrations.RunPython.noop),
    ]
