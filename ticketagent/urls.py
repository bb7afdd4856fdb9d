from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from ticketagent import metrics, views

urlpatterns = [
    path("", views.task_list, name="tasks"),
    path("upload/", views.upload, name="upload"),
    path("tasks/<int:pk>/", views.task_detail, name="task-detail"),
    path("tasks/<int:pk>/progress/", views.task_progress, name="task-progress"),
    path("tasks/<int:pk>/events.jsonl", views.task_events_jsonl, name="task-events"),
    path("tasks/<int:pk>/dry-run/", views.task_dry_run_view, name="task-dry-run"),
    path("tasks/<int:pk>/resume/", views.task_resume_view, name="task-resume"),
    path("tasks/<int:pk>/pause/", views.task_pause_view, name="task-pause"),
    path("tasks/<int:pk>/cancel/", views.task_cancel_view, name="task-cancel"),
    path("tasks/<int:pk>/clone/", views.task_clone_view, name="task-clone"),
    path("items/<int:pk>/", views.item_checkpoint, name="item-detail"),
    path("items/<int:pk>/approval/", views.item_approval_view, name="item-approval"),
    path("review/", views.review_queue, name="review"),
    path("effects/<int:pk>/reconcile/", views.effect_reconcile_view, name="effect-reconcile"),
    path("effects/<int:pk>/review/", views.effect_review_view, name="effect-review"),
    path("ledger/actions/", views.effect_classes, name="effect-classes"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/rq/", include("django_rq.urls")),
    path("admin/", admin.site.urls),
]
