"""URL routes: the pages (ticketagent.web), /metrics, the health probes, login, and the admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from ticketagent.web import items, ledger, metrics, probes, review, tasks, upload, workers

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
    path("items/<int:pk>/", items.item_detail, name="item-detail"),
    path("items/<int:pk>/approval/", review.item_approval_view, name="item-approval"),
    path("items/<int:pk>/retry/", review.item_retry_view, name="item-retry"),
    path("items/<int:pk>/skip/", review.item_skip_view, name="item-skip"),
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
