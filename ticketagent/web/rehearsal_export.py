"""The rehearsal report as a CSV file: one row per ticket, headed in people's words, without secrets.

What a row holds is what the report's table shows: the triage, the actions
that would run, what was held and why, the rules applied, the names of the
failed reply checks, the draft's subject, tokens, the expected labels and
whether they agree. What it leaves out on purpose: the customer's address,
the ticket's body and metadata (internal fields live there), the draft's
body and the checks' details (a reply a check held may quote a secret it
found). A cell that a spreadsheet would read as a formula starts with '.
"""

import csv

from ticketagent.eventlog.usage import items_usage
from ticketagent.models import Item, ItemStatus, Task
from ticketagent.web.selectors.rehearsal import FIELDS, agreement_of

HEADERS = ("Ticket", "Subject", "Item status", "Category", "Priority", "Sentiment", "Language",
           "Actions that would run", "Held for approval", "Rules applied", "Failed reply checks", "Ticket status after",
           "Reply subject", "Tokens", "Model calls", "Expected category", "Expected priority", "Expected actions",
           "Category agrees", "Priority agrees", "Actions agree")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
CHUNK = 2000


def _cell(value) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA) else text


def _yes_no(value) -> str:
    return "" if value is None else ("yes" if value else "no")


def _row(item: dict, triage: dict, draft: dict, decide: dict, tokens) -> list[str]:
    expected = item["expected"] or {}
    agree = agreement_of(expected, triage, decide) if decide else {}
    held = "; ".join(f"{action}: {why}" for action, why in sorted((decide.get("held") or {}).items()))
    return [_cell(v) for v in (
        item["ticket_id"], item["subject"], ItemStatus(item["status"]).label, triage.get("category"),
        triage.get("priority"), triage.get("sentiment"), triage.get("language"),
        " ".join(decide.get("actions") or ()), held,
        "; ".join(rule.get("rule", "") for rule in decide.get("rules") or ()),
        "; ".join(check.get("check", "") for check in decide.get("checks") or ()), decide.get("status"),
        draft.get("subject"), tokens.total if tokens else "", tokens.calls if tokens else "",
        expected.get("category"), expected.get("priority"), " ".join(expected.get("actions") or ()),
        *(_yes_no(agree.get(name)) for name in FIELDS))]


class _Line:
    """A file-like object that hands back what csv.writer wrote (one line at a time)."""

    def write(self, text: str) -> str:
        return text


def rehearsal_csv_lines(task: Task):
    """The CSV file's lines: the headers, then each ticket in file order; a query per CHUNK tickets (and one for
    their tokens), so a long rehearsal streams."""
    writer = csv.writer(_Line())
    yield "\ufeff" + writer.writerow(HEADERS)  # the byte-order mark: a spreadsheet then reads UTF-8
    rows = (Item.objects.filter(task=task).order_by("row")
            .values("pk", "ticket_id", "subject", "status", "expected", "checkpoint__step_outputs__triage",
                    "checkpoint__step_outputs__draft", "checkpoint__step_outputs__decide"))
    chunk: list[dict] = []
    for item in rows.iterator(chunk_size=CHUNK):
        chunk.append(item)
        if len(chunk) == CHUNK:
            yield from _lines(writer, chunk)
            chunk = []
    yield from _lines(writer, chunk)


def _lines(writer, chunk: list[dict]):
    tokens = items_usage(item["pk"] for item in chunk) if chunk else {}
    for item in chunk:
        yield writer.writerow(_row(item, item["checkpoint__step_outputs__triage"] or {},
                                   item["checkpoint__step_outputs__draft"] or {},
                                   item["checkpoint__step_outputs__decide"] or {}, tokens.get(item["pk"])))
