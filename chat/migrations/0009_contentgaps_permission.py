"""The permission to see content gaps (chat.review.gaps), on chat's Message model, created here as a row; chat 0010
declares it on the model's Meta as well, so that post_migrate recreates it where the table was emptied."""

from django.db import migrations

CODENAME = "view_contentgaps"
NAME = "Can view content gaps"


def add(apps, schema_editor):
    content_type, _ = apps.get_model("contenttypes", "ContentType").objects.get_or_create(
        app_label="chat", model="message")
    apps.get_model("auth", "Permission").objects.get_or_create(
        codename=CODENAME, content_type=content_type, defaults={"name": NAME})


def remove(apps, schema_editor):
    apps.get_model("auth", "Permission").objects.filter(
        codename=CODENAME, content_type__app_label="chat").delete()


class Migration(migrations.Migration):

    dependencies = [
        ("chat", "0008_review_grant_access"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(add, remove)]
