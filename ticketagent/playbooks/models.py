"""Playbooks in the database: a playbook, its versions (one open draft, published ones frozen), its articles.

A version's content (`PlaybookVersion.content`) is its spec without the
articles; the articles are rows, so PostgreSQL's full-text search finds
them (`Article.search`, a GIN index). `spec()` puts the two together.
A published version never changes: the services refuse to edit it, and
its `content_hash` (of the whole spec) says so.
"""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q


class Playbook(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self):
        return self.name


class VersionStatus(models.TextChoices):
    DRAFT = "draft", "draft"
    PUBLISHED = "published", "published"


class PlaybookVersion(models.Model):
    playbook = models.ForeignKey(Playbook, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=VersionStatus.choices, default=VersionStatus.DRAFT)
    format = models.PositiveIntegerField(default=1)
    content = models.JSONField(default=dict)  # the spec without its articles (they are rows)
    content_hash = models.CharField(max_length=64, blank=True)  # of the whole spec, written when published
    based_on = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    published_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["playbook_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["playbook", "number"], name="playbook_version_number_unique"),
            # editing makes *the* draft: one open draft per playbook
            models.UniqueConstraint(fields=["playbook"], condition=Q(status="draft"), name="playbook_one_draft"),
            # a published version carries the hash of what was published
            models.CheckConstraint(condition=Q(status="draft") | ~Q(content_hash=""),
                                   name="playbook_published_has_hash"),
        ]

    def __str__(self):
        return f"{self.playbook.name} v{self.number}" + (" (draft)" if self.is_draft else "")

    @property
    def is_draft(self) -> bool:
        return self.status == VersionStatus.DRAFT

    @property
    def label(self) -> str:
        return f"{self.playbook.name} v{self.number}"


class Article(models.Model):
    """A knowledge article of one version, searched by the draft step's knowledge tool."""

    version = models.ForeignKey(PlaybookVersion, on_delete=models.CASCADE, related_name="articles")
    position = models.PositiveIntegerField(default=0)
    title = models.CharField(max_length=200)
    body = models.TextField()
    tags = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    enabled = models.BooleanField(default=True)
    search = SearchVectorField(null=True, editable=False)  # title (weight A), tags (B), body (C)

    class Meta:
        ordering = ["version_id", "position", "id"]
        indexes = [GinIndex(fields=["search"], name="article_search_idx")]

    def __str__(self):
        return self.title
