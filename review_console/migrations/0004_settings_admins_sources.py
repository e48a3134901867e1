"""Settings admins own sources' field maps and the customer journey (docs/console.md,
"Roles"): they may change sources, and see cases (masked, as everyone) so that an
unreadable submission's case leads them to the map that reads it."""

from django.db import migrations

SETTINGS_ADMINS = "Settings admins"
GRANTED = ["change_source", "view_source", "view_reviewcase"]


def grant(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=SETTINGS_ADMINS)
    group.permissions.add(
        *Permission.objects.filter(content_type__app_label="idempotency_core", codename__in=GRANTED)
    )


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group = Group.objects.filter(name=SETTINGS_ADMINS).first()
    if group is not None:
        group.permissions.remove(
            *Permission.objects.filter(
                content_type__app_label="idempotency_core", codename__in=GRANTED
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("review_console", "0003_cause_hold"),
        ("idempotency_core", "0028_business_configuration"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
