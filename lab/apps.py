from django.apps import AppConfig


class LabConfig(AppConfig):
    """Installed for its management commands (`evaluate`, `calibrate`) and the admin's refit from verdicts,
    which search calls through the function registered here (serving never imports the lab); it has no models."""

    name = "lab"

    def ready(self) -> None:
        from lab.verdicts import propose
        from search.answerability import refit_register

        refit_register(propose)
