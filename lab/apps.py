"""App config for the lab: it brings the sandbox, emulator, drill and benchmark commands."""

from django.apps import AppConfig


class LabConfig(AppConfig):
    name = "lab"
    verbose_name = "Lab (sandbox, emulators, drill, benchmarks)"
