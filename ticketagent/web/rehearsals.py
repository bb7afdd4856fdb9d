"""The rehearsal pages: a rehearsal's report (per ticket, distributions, agreement), compare two, go live."""

from django.http import Http404

from ticketagent.web.access import login_required


def _not_yet(*args, **kwargs):
    raise Http404("the rehearsal pages come with the next change")


rehearsal_report = rehearsal_rerun_view = rehearsal_compare = go_live_view = login_required(_not_yet)
