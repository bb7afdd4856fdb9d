from django.contrib import admin

from ticketagent.models import Blob, Checkpoint, Event, Item, Task


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "status", "resume_count", "allow_auto_close", "notify_channel", "created_at")
    list_filter = ("status", "notify_channel")
    search_fields = ("name", "source_filename")
    readonly_fields = ("status", "status_reason", "consecutive_failures", "last_success_item", "resume_count",
                       "created_by", "started_at", "finished_at", "source_task")


@admin.register(Item)
class ItemAdmin(admin.ModelAdmin):
    list_display = ("id", "task", "ticket_id", "status", "attempt", "lease_owner", "updated_at")
    list_filter = ("status",)
    search_fields = ("ticket_id", "customer_email", "subject")
    readonly_fields = ("status", "attempt", "lease_owner", "lease_token", "lease_expires_at", "last_error",
                       "failure_kind", "approval", "approval_by", "approval_reason", "origin", "enqueued_at",
                       "finished_at")


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("item", "task", "plan_version", "schema_version", "cursor", "retry_count", "updated_at")

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    """The event log is append-only."""

    list_display = ("id", "task", "item", "type", "actor", "timestamp")
    list_filter = ("type",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Blob)
class BlobAdmin(admin.ModelAdmin):
    list_display = ("sha256", "created_at")

    def has_change_permission(self, request, obj=None):
        return False
