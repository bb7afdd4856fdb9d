from django.apps import AppConfig


class TicketagentConfig(AppConfig):
    name = "ticketagent"
    verbose_name = "Ticket agents"

    def ready(self):
        from ticketagent import receivers  # noqa: F401  (connects ledger signals)
