"""Content types follow the models that moved from `jobs` to `whatif` (issue 31), so permissions and
admin log entries that point at them keep pointing at the same models."""

from django.db import migrations

MODELS = ('advisorsearch', 'advisorcandidate', 'advisorhistorydata', 'advisorevent')


def _relabel(apps, old, new):
    content_types = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not content_types.objects.filter(app_label=new, model=model).exists():
            content_types.objects.filter(app_label=old, model=model).update(app_label=new)


def forward(apps, schema_editor):
    _relabel(apps, "jobs", "whatif")


def backward(apps, schema_editor):
    _relabel(apps, "whatif", "jobs")


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("whatif", "0001_initial"),
    ]

    operations = [migrations.RunPython(forward, backward)]
