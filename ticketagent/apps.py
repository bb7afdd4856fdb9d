"""The ticketagent Django app; on start it connects the ledger's signals to the event log."""

from django.apps import AppConfig


class TicketagentConfig(AppConfig):
    name = "ticketagent"
    verbose_name = "Ticket agents"

    def ready(self):
        from ticketagent import checks  # noqa: F401  (registers the settings checks)
        from ticketagent.scheduling import window  # noqa: F401  (listens to the pipeline's and services' signals)
        from ticketagent.services import effect_events  # noqa: F401  (connects the ledger's signals)
