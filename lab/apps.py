from django.apps import AppConfig


class LabConfig(AppConfig):
    """Installed for its management commands (`evaluate`, `calibrate`); it has no models."""

    name = "lab"
