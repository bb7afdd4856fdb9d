"""The ticketagent Django app; on start it connects the ledger's signals to the event log."""

from django.apps import AppConfig


class TicketagentConfig(AppConfig):
    name = "ticketagent"
    verbose_name = "Ticket agents"

    def ready(self):
        from ticketagent import (
            checks,  # noqa: F401  (registers the settings checks)
            window,  # noqa: F401  (scheduling listens to the pipeline's and services' signals)
        )
        from ticketagent.eventlog import receivers  # noqa: F401  (connects the ledger's signals)
