"""The playbook pages: list, a version (read, or edited as a draft by editors), publish, diff, import and export."""

from django.http import Http404

from ticketagent.web.access import login_required


def _not_yet(*args, **kwargs):
    raise Http404("the playbook pages come with the next change")


playbook_list = playbook_detail = version_detail = version_guidance = version_categories = version_rules = \
    version_reply = version_article_add = version_article = version_publish = draft_open_view = version_export = \
    playbook_diff = playbook_import_view = login_required(_not_yet)
