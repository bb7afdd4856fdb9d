"""The admin shows everything; state changes go through the dashboard.

Every state change of a task or an item must append an event in its own
transaction (services.py), which the admin cannot do. So the admin is for
looking: tasks may be renamed, nothing else is written here, and nothing is
deleted (events are append-only, and deleting a task or item would delete
them with it).
"""

from django.contrib import admin

from ledger.admin import ReadOnlyAdmin as ViewOnlyAdmin
from ticketagent.models import ApiOutage, Article, Blob, Checkpoint, Event, Item, Playbook, PlaybookVersion, Task


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "status", "resume_count", "allow_auto_close", "notify_channel", "created_by",
                    "created_at")
    list_filter = ("status", "notify_channel")
    list_select_related = ("created_by",)
    search_fields = ("name", "source_filename")
    # Only the name may be edited: every other field is state, changed by services with an event.
    readonly_fields = ("source_filename", "status", "status_reason", "allow_auto_close", "notify_channel",
                       "model_label", "failure_threshold", "consecutive_failures", "last_success_item",
                       "resume_count", "created_by", "created_at", "started_at", "finished_at", "source_task")

    def has_add_permission(self, request):
        return False  # tasks are created by an upload, which also writes their items and events

    def has_delete_permission(self, request, obj=None):
        return False  # events are append-only; deleting a task would cascade to them


@admin.register(Item)
class ItemAdmin(ViewOnlyAdmin):
    list_display = ("id", "task", "ticket_id", "status", "attempt", "lease_owner", "updated_at")
    list_filter = ("status",)
    list_select_related = ("task",)
    search_fields = ("ticket_id", "customer_email", "subject")


@admin.register(Checkpoint)
class CheckpointAdmin(ViewOnlyAdmin):
    list_display = ("item", "task", "plan_version", "schema_version", "cursor", "retry_count", "updated_at")
    list_select_related = ("item", "task")


@admin.register(Event)
class EventAdmin(ViewOnlyAdmin):
    """The event log is append-only."""

    list_display = ("id", "task", "item", "type", "actor", "timestamp")
    list_filter = ("type",)
    list_select_related = ("task", "item")


@admin.register(Blob)
class BlobAdmin(ViewOnlyAdmin):
    list_display = ("sha256", "created_at")


@admin.register(ApiOutage)
class ApiOutageAdmin(ViewOnlyAdmin):
    list_display = ("what", "endpoint", "started_at", "ended_at")
    list_filter = ("what",)


@admin.register(Playbook)
class PlaybookAdmin(ViewOnlyAdmin):
    """Playbooks are edited on their own pages (drafts, publishing): here they are only shown."""

    list_display = ("id", "name", "created_at")


@admin.register(PlaybookVersion)
class PlaybookVersionAdmin(ViewOnlyAdmin):
    list_display = ("id", "playbook", "number", "status", "content_hash", "published_by", "published_at")
    list_filter = ("status",)
    list_select_related = ("playbook", "published_by")


@admin.register(Article)
class ArticleAdmin(ViewOnlyAdmin):
    list_display = ("id", "version", "title", "enabled")
    list_select_related = ("version__playbook",)
