"""Ledger rows are evidence: the admin shows them, read-only."""

from django.contrib import admin

from ledger.models import BlockedDuplicate, Effect, EffectTransition


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class TransitionInline(admin.TabularInline):
    model = EffectTransition
    extra = 0
    can_delete = False
    readonly_fields = ("from_state", "to_state", "actor", "note", "at")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    list_display = ("id", "action", "effect_class", "channel", "state", "attempts", "owner_task", "owner_item",
                    "resolved_by", "updated_at")
    list_filter = ("state", "effect_class", "channel", "resolved_by")
    search_fields = ("idempotency_key", "slot", "owner_task", "owner_item", "external_ref")
    inlines = [TransitionInline]


@admin.register(BlockedDuplicate)
class BlockedDuplicateAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "effect", "owner_task", "owner_item", "owner_step", "existing_state", "at")
    list_filter = ("kind",)


@admin.register(EffectTransition)
class EffectTransitionAdmin(ReadOnlyAdmin):
    list_display = ("id", "effect", "from_state", "to_state", "actor", "at")
