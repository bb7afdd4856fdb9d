"""URL routes: the pages (ticketagent.web), /metrics, the health probes, login, and the admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from ticketagent.services.items import item_retry, item_skip
from ticketagent.web import items, ledger, metrics, playbooks, probes, rehearsals, review, tasks, upload, workers
from ticketagent.web.playbook_forms import EDITORS

urlpatterns = [
    path("", tasks.task_list, name="tasks"),
    path("upload/", upload.upload, name="upload"),
    path("upload/helpdesk/", upload.upload_from_helpdesk, name="upload-helpdesk"),
    path("tasks/<int:pk>/", tasks.task_detail, name="task-detail"),
    path("tasks/<int:pk>/progress/", tasks.task_progress, name="task-progress"),
    path("tasks/<int:pk>/events.jsonl", tasks.task_events_jsonl, name="task-events"),
    path("tasks/<int:pk>/dry-run/", tasks.task_dry_run_view, name="task-dry-run"),
    path("tasks/<int:pk>/resume/", tasks.task_resume_view, name="task-resume"),
    path("tasks/<int:pk>/pause/", tasks.task_pause_view, name="task-pause"),
    path("tasks/<int:pk>/cancel/", tasks.task_cancel_view, name="task-cancel"),
    path("tasks/<int:pk>/clone/", tasks.task_clone_view, name="task-clone"),
    path("tasks/<int:pk>/move-version/", tasks.task_move_version_view, name="task-move-version"),
    path("tasks/<int:pk>/rehearsal/", rehearsals.rehearsal_report, name="rehearsal"),
    path("tasks/<int:pk>/rehearsal/export.csv", rehearsals.rehearsal_export, name="rehearsal-export"),
    path("tasks/<int:pk>/rehearsal/rerun/", rehearsals.rehearsal_rerun_view, name="rehearsal-rerun"),
    path("tasks/<int:pk>/compare/<int:other>/", rehearsals.rehearsal_compare, name="rehearsal-compare"),
    path("tasks/<int:pk>/go-live/", rehearsals.go_live_view, name="go-live"),
    path("playbooks/", playbooks.playbook_list, name="playbooks"),
    path("playbooks/import/", playbooks.playbook_import_view, name="playbook-import"),
    path("playbooks/new/", playbooks.playbook_new, name="playbook-new"),
    path("playbooks/<int:pk>/", playbooks.playbook_detail, name="playbook"),
    path("playbooks/<int:pk>/draft/", playbooks.draft_open_view, name="playbook-draft"),
    path("playbooks/<int:pk>/rename/", playbooks.playbook_rename_view, name="playbook-rename"),
    path("playbooks/<int:pk>/diff/", playbooks.playbook_diff, name="playbook-diff"),
    path("playbooks/versions/<int:pk>/", playbooks.version_detail, name="playbook-version"),
    *(path(f"playbooks/versions/<int:pk>/{section}/", playbooks.version_edit, {"section": section},
           name=f"playbook-{section}") for section in EDITORS),
    path("playbooks/versions/<int:pk>/publish/", playbooks.version_publish, name="playbook-publish"),
    path("playbooks/versions/<int:pk>/discard/", playbooks.version_discard, name="playbook-discard"),
    path("playbooks/versions/<int:pk>/export.yaml", playbooks.version_export, name="playbook-export"),
    path("items/<int:pk>/", items.item_detail, name="item-detail"),
    path("items/<int:pk>/approval/", review.item_approval_view, name="item-approval"),
    path("items/approvals/", review.item_approvals_view, name="item-approvals"),
    path("items/<int:pk>/retry/", review.failed_item_control_view, {"service": item_retry}, name="item-retry"),
    path("items/<int:pk>/skip/", review.failed_item_control_view, {"service": item_skip}, name="item-skip"),
    path("search/", items.search, name="search"),
    path("review/", review.review_queue, name="review"),
    path("attention/", review.attention, name="attention"),
    path("workers/", workers.workers_page, name="workers"),
    path("effects/<int:pk>/reconcile/", review.effect_reconcile_view, name="effect-reconcile"),
    path("effects/<int:pk>/review/", review.effect_review_view, name="effect-review"),
    path("ledger/actions/", ledger.effect_classes, name="effect-classes"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("favicon.ico", items.favicon, name="favicon"),
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/rq/", include("django_rq.urls")),
    path("admin/", admin.site.urls),
]
