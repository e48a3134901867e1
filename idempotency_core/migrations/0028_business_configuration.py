"""The business configuration (issue 25): its versions, the round robin's counters, and
the content an operation sends, stored when it is first attempted.

Besides the tables:

- versions are append-only: a trigger refuses UPDATE and DELETE, as on audit entries;
- a new version NOTIFYs `onefold_config` at its commit (the function of migration
  0017), so every process's cached configuration is dropped;
- the `Settings admins` group, with the permission to change the configuration.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

TABLE = "idempotency_core_businessconfigversion"
APPEND_ONLY = f"""
CREATE OR REPLACE FUNCTION onefold_config_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'configuration versions are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER {TABLE}_append_only
    BEFORE UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION onefold_config_append_only();
CREATE TRIGGER {TABLE}_config_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {TABLE}
    FOR EACH STATEMENT EXECUTE FUNCTION onefold_config_changed();
"""
APPEND_ONLY_REVERSE = f"""
DROP TRIGGER IF EXISTS {TABLE}_config_changed ON {TABLE};
DROP TRIGGER IF EXISTS {TABLE}_append_only ON {TABLE};
DROP FUNCTION IF EXISTS onefold_config_append_only();
"""
SETTINGS_ADMINS = "Settings admins"
SETTINGS_PERMS = ["change_businessconfig", "view_businessconfigversion"]


def create_settings_admins(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after all migrations; the group needs them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=SETTINGS_ADMINS)
    group.permissions.add(
        *Permission.objects.filter(
            content_type__app_label="idempotency_core", codename__in=SETTINGS_PERMS
        )
    )


def remove_settings_admins(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=SETTINGS_ADMINS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0027_destination_budget"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="AssigneeTurn",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("scope", models.CharField(max_length=255, unique=True)),
                ("turns", models.PositiveBigIntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name="operation",
            name="content",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="BusinessConfigVersion",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("number", models.PositiveIntegerField(unique=True)),
                ("document", models.JSONField(default=dict)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("actor_label", models.CharField(max_length=150)),
                ("reason", models.TextField(blank=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "permissions": [("change_businessconfig", "Can change the business configuration")],
            },
        ),
        migrations.RunSQL(APPEND_ONLY, APPEND_ONLY_REVERSE),
        migrations.RunPython(create_settings_admins, remove_settings_admins),
    ]
