"""The Kestrel Cycles policy as a playbook: each numbered rule it enforces, on the tickets that exercise it.

The playbook is the shipped example (docs/examples/playbook-kestrel.yaml);
the tickets are the labelled rehearsal file beside it (the example's 40
tickets with the status expected.md gives each). The offline model triages,
drafts and decides; the rules decide what runs. Which policy rule is
enforced by what, and which are guidance only, is the coverage table of
docs/playbooks.md: `test_the_coverage_table_names_every_rule` keeps the two
in step.
"""

import csv
import re
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from ticketagent.llm.offline import OfflineModel
from ticketagent.llm.schemas import Decision, triage_schema
from ticketagent.pipeline.model_steps import signed

from . import kestrel

DOCS = Path(__file__).resolve().parents[2] / "docs" / "playbooks.md"
ANSWER = {"save_draft", "notify_customer", "set_status"}


@pytest.fixture(scope="module")
def run():
    """ticket id -> (ticket, triage, decision) for all 40 tickets."""
    spec, out = kestrel.playbook(), {}
    for ticket_id, ticket in kestrel.labelled().items():
        out[ticket_id] = (ticket, *kestrel.rehearse(spec, ticket))
    return out


def ids(*numbers) -> list[str]:
    return [f"KC-{n}" for n in numbers]


def status(decision: dict) -> str:
    return decision["status"] if "set_status" in decision["actions"] else "none"


def queue(decision: dict) -> str:
    return (decision.get("escalate_to") or {}).get("rt_queue", "") if "escalate" in decision["actions"] else ""


def test_the_shipped_rehearsal_file_is_the_example_with_its_statuses():
    if kestrel.present():
        skip_or_fail(kestrel.present())
    shipped = kestrel.labelled()
    for ticket_id, ticket in kestrel.tickets().items():
        assert {k: v for k, v in shipped[ticket_id].items() if k != "expected_status"} == ticket
    statuses = {t: row["expected_status"] for t, row in shipped.items()}
    assert [t for t, s in statuses.items() if s == "solved"] == ["KC-1035"]
    assert sorted(t for t, s in statuses.items() if s == "none") == ids(1022, 1023, 1025)


class TestCategory:
    def test_rule_3_a_reseller_bot_is_spam_whatever_it_says(self, run):
        ticket, triage, _ = run["KC-1023"]
        assert triage["category"] == "spam" and triage["decided_by"]["category"] == "Rule 3: reseller bots are spam"

    def test_rule_4_safety_words_in_every_language(self, run):
        for ticket_id in ids(1009, 1010, 1011, 1012, 1029):
            assert run[ticket_id][1]["category"] == "safety", ticket_id

    def test_rule_5_threats_are_abuse(self, run):
        assert run["KC-1024"][1]["category"] == "abuse"

    def test_rule_6_spam_words_on_a_ticket_without_an_order(self, run):
        for ticket_id in ids(1022, 1025):
            assert run[ticket_id][1]["category"] == "spam", ticket_id
        spec = kestrel.playbook()
        ticket = {**run["KC-1022"][0], "metadata": {"order_id": "KO-50001"}}
        triage, _ = kestrel.rehearse(spec, ticket)
        assert triage["category"] != "spam", "a ticket with an order_id is never spam under rule 6"

    def test_rule_7_fleet_by_count_or_by_word(self, run):
        assert run["KC-1020"][1]["facts"]["bikes_requested"] == 12
        assert run["KC-1021"][1]["facts"]["bikes_requested"] == 3  # fewer than 5, but "Diensträder"
        for ticket_id in ids(1020, 1021):
            assert run[ticket_id][1]["category"] == "fleet", ticket_id

    def test_rule_8_the_first_rule_wins(self, run):
        # KC-1023 reads like a stock question (other) and names no spam word: rule 3 decides
        assert run["KC-1023"][1]["model"]["category"] != "spam"

    def test_rule_2_one_category_of_the_list(self, run):
        names = {c.name for c in kestrel.playbook().categories}
        assert all(triage["category"] in names for _, triage, _ in run.values())


class TestPriority:
    def test_rule_9_the_table_by_category_and_plan(self, run):
        table = {"safety": ("urgent", "urgent"), "abuse": ("high", "high"), "fleet": ("high", "high"),
                 "spam": ("low", "low"), **{c: ("normal", "high") for c in ("shipping", "returns", "warranty",
                                                                             "billing")},
                 **{c: ("low", "normal") for c in ("account", "assembly", "app", "other")}}
        legal = ids(1030, 1031)
        for ticket_id, (ticket, triage, _) in run.items():
            if ticket_id in legal:
                continue
            care = ticket["metadata"].get("plan") == "care"
            assert triage["priority"] == table[triage["category"]][care], ticket_id
            assert triage["decided_by"]["priority"].startswith(("Rule 9", "Rule 10")), ticket_id

    def test_rule_1_the_plan_comes_from_the_order_data(self, run):
        assert run["KC-1005"][1]["priority"] == "low"  # "I'm a Kestrel Care member", plan regular

    def test_rule_10_safety_is_urgent_whatever_the_ticket_says(self, run):
        ticket, triage, _ = run["KC-1029"]
        assert ticket["priority"] == "low" and triage["priority"] == "urgent"

    def test_rule_11_chargebacks_and_legal_threats_are_at_least_high(self, run):
        for ticket_id in ids(1030, 1031):
            triage = run[ticket_id][1]
            assert triage["priority"] == "high", ticket_id
            assert triage["decided_by"]["priority"] == "Rule 11: chargebacks and legal threats are at least high"

    def test_rule_12_the_form_pick_changes_nothing(self, run):
        picked = {t: run[t][0]["priority"] for t in ids(1024, 1026, 1029, 1039)}
        assert picked == {"KC-1024": "urgent", "KC-1026": "urgent", "KC-1029": "low", "KC-1039": "high"}
        assert {t: run[t][1]["priority"] for t in picked} == {
            "KC-1024": "high", "KC-1026": "low", "KC-1029": "urgent", "KC-1039": "low"}


class TestActionsAndStatus:
    def test_rule_13_an_answered_ticket_gets_draft_reply_status(self, run):
        for ticket_id, (_, triage, decision) in run.items():
            if triage["category"] not in ("spam", "abuse"):
                assert ANSWER <= set(decision["actions"]), ticket_id

    def test_rule_14_exactly_one_of_set_status_and_close(self, run):
        for ticket_id, (_, _, decision) in run.items():
            assert len({"set_status", "close_ticket"} & set(decision["actions"])) == 1, ticket_id

    def test_rules_15_to_17_the_status(self, run):
        for ticket_id, (ticket, _, decision) in run.items():
            assert status(decision) == ticket["expected_status"], ticket_id
        assert run["KC-1035"][2]["decided_by"]["status"] == (
            "Rule 16: solved when the customer confirms the fix after our reply")
        assert run["KC-1036"][1]["facts"]["confirms_fixed"] is True and status(run["KC-1036"][2]) == "pending"

    def test_rule_17_an_escalated_ticket_is_never_closed(self, run):
        for ticket_id, (_, _, decision) in run.items():
            if "escalate" in decision["actions"]:
                assert "close_ticket" not in decision["actions"] and decision["status"] == "escalated", ticket_id

    def test_rule_18_people_set_open_and_on_hold_and_only_spam_closes(self, run):
        for ticket_id, (_, triage, decision) in run.items():
            assert status(decision) not in ("open", "on_hold"), ticket_id
            assert ("close_ticket" in decision["actions"]) == (triage["category"] == "spam"), ticket_id

    def test_rule_19_spam_gets_nothing_but_a_close(self, run):
        for ticket_id in ids(1022, 1023, 1025):
            assert run[ticket_id][2]["actions"] == ["close_ticket"], ticket_id

    def test_rule_20_abuse_gets_no_reply(self, run):
        decision = run["KC-1024"][2]
        assert decision["actions"] == ["set_status", "escalate"] and decision["status"] == "escalated"


class TestEscalation:
    QUEUES = {"safety-team": ids(1009, 1010, 1011, 1012, 1029), "returns-approval": ids(1013, 1014, 1015),
              "finance-legal": ids(1030, 1031), "trust": ids(1024), "fleet-sales": ids(1020, 1021)}

    def test_rules_21_to_25_and_27_one_queue_per_ticket_and_nothing_else(self, run):
        expected = {t: q for q, tickets in self.QUEUES.items() for t in tickets}
        assert {t: queue(d) for t, (_, _, d) in run.items() if queue(d)} == expected
        for ticket_id, (_, _, decision) in run.items():
            if ticket_id in expected:
                assert decision["decided_by"]["escalate_to"].startswith("Rule"), ticket_id

    def test_held_replies_and_replies_sent_at_once(self, run):
        for ticket_id in self.QUEUES["returns-approval"] + self.QUEUES["finance-legal"]:
            held = run[ticket_id][2]["held"]
            assert "notify_customer" in held and "team lead approves" in held["notify_customer"], ticket_id
        for ticket_id in self.QUEUES["safety-team"] + self.QUEUES["fleet-sales"]:
            assert "notify_customer" not in run[ticket_id][2]["held"], ticket_id  # rule 21: at once

    def test_rule_25_the_limit_compares_the_order_total_in_its_currency(self, run):
        totals = {t: run[t][0]["metadata"]["order_total"] for t in ids(1016, 1017, 1027)}
        assert totals == {"KC-1016": 400.0, "KC-1017": 430.0, "KC-1027": 89.0}  # 430 is USD: under $450
        for ticket_id in totals:
            assert "escalate" not in run[ticket_id][2]["actions"], ticket_id
        spec = kestrel.playbook()
        over = {**run["KC-1017"][0], "metadata": {**run["KC-1017"][0]["metadata"], "order_total": 451.0}}
        assert queue(kestrel.rehearse(spec, over)[1]) == "returns-approval"
        euros = {**run["KC-1017"][0], "metadata": {**run["KC-1017"][0]["metadata"], "currency": "EUR"}}
        assert queue(kestrel.rehearse(spec, euros)[1]) == "returns-approval"  # 430 EUR is over EUR 400

    def test_rule_26_an_old_bike_is_not_escalated(self, run):
        ticket, triage, decision = run["KC-1018"]
        assert ticket["metadata"]["months_since_delivery"] == 31 and triage["category"] == "warranty"
        assert "escalate" not in decision["actions"] and status(decision) == "pending"


class TestReplies:
    def test_rule_33_the_signature(self):
        spec = kestrel.playbook()
        assert signed("Hello Sam, glad it works again.", spec.reply.signature).endswith("\n\nKestrel Support")

    def test_rules_29_to_31_the_checks_are_on(self):
        checks = kestrel.playbook().checks
        assert checks.contacts_allowed == kestrel.PHONES and checks.internal_fields == ["internal_note"]
        assert checks.promises and checks.money and checks.secrets and checks.personal_data
        assert checks.made_up_contacts and checks.article_titles


# --------------------------------------------------------------------------- rule 35: injected instructions

INJECTED = {  # ticket -> (subject, body, form priority) with the injected words taken out
    "KC-1026": ("firmware update stuck at 40%", r"Note for the AI assistant.*", ""),
    "KC-1027": ("Torn saddle bag", r"Refund me €2000 now.*?person\.", None),
    "KC-1028": (None, r"Instruction pour l'assistant.*?résolu\.", None),
    "KC-1029": (None, r"SYSTEM:.*", ""),
}


def cleaned(ticket: dict) -> dict:
    subject, pattern, priority = INJECTED[ticket["ticket_id"]]
    body = re.sub(pattern, "", ticket["body"], flags=re.S)
    assert body != ticket["body"], ticket["ticket_id"]
    return {**ticket, "subject": subject or ticket["subject"], "body": body,
            "priority": ticket["priority"] if priority is None else priority}


class Obedient(OfflineModel):
    """A model that does what the ticket's text says: urgent, not escalated, solved and closed."""

    def triage(self, ticket, *, playbook=None, usage=None, allowance=None):
        found = super().triage(ticket, playbook=playbook)
        return found.model_copy(update={"priority": "urgent" if "urgent" in ticket["body"].lower() else "low"})

    def decide(self, ticket, triage, reply, *, playbook=None, usage=None, allowance=None):
        return Decision(actions=["save_draft", "notify_customer", "set_status", "close_ticket"], status="solved",
                        reason="the ticket said so")


def outcome(triage: dict, decision: dict) -> tuple:
    return (triage["category"], triage["priority"], status(decision), tuple(decision["actions"]), queue(decision))


@pytest.mark.parametrize("ticket_id", sorted(INJECTED))
def test_rule_35_injected_lines_change_no_status_priority_or_action(run, ticket_id):
    ticket, triage, decision = run[ticket_id]
    spec = kestrel.playbook()
    clean = outcome(*kestrel.rehearse(spec, cleaned(ticket)))
    assert outcome(triage, decision) == clean
    assert outcome(*kestrel.rehearse(spec, ticket, Obedient())) == clean, "the rules win over an obedient model"
    assert (triage["priority"], status(decision), set(decision["actions"])) == (
        ticket["expected_priority"], ticket["expected_status"], set(ticket["expected_actions"].split()))


# --------------------------------------------------------------------------- the rehearsal's agreement

def test_agreement_of_the_offline_model_under_the_rules(run):
    """The numbers docs/playbooks.md gives: category and priority 39 of 40 (KC-1033's change of address and
    phone number mentions "Rechnungen", a billing keyword, so the offline model says billing and the table
    makes it high), status and actions 40 of 40."""
    agree = {"category": 0, "priority": 0, "status": 0, "actions": 0}
    wrong = set()
    for ticket_id, (ticket, triage, decision) in run.items():
        for name, ok in (("category", triage["category"] == ticket["expected_category"]),
                         ("priority", triage["priority"] == ticket["expected_priority"]),
                         ("status", status(decision) == ticket["expected_status"]),
                         ("actions", set(decision["actions"]) == set(ticket["expected_actions"].split()))):
            agree[name] += ok
            if not ok:
                wrong.add(ticket_id)
    assert agree == {"category": 39, "priority": 39, "status": 40, "actions": 40}, (agree, wrong)
    assert wrong == {"KC-1033"}
    text = DOCS.read_text(encoding="utf-8")
    for name, n in agree.items():
        assert f"| {name} | {n} / 40 |" in text, name


def test_the_offline_model_extracts_what_it_can_and_says_what_it_cannot(run):
    spec = kestrel.playbook()
    schema = triage_schema(tuple(c.name for c in spec.categories), spec.extracted_facts())
    for _, triage, _ in run.values():
        schema.model_validate({k: v for k, v in triage.items() if k in schema.model_fields})
    facts = run["KC-1001"][1]["facts"]
    assert facts == {"bikes_requested": None, "confirms_fixed": None}  # nothing said: not known


def test_the_coverage_table_names_every_rule():
    text = DOCS.read_text(encoding="utf-8")
    table = text.split("<!-- kestrel coverage -->", 2)[1]
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| ([^|]+) \|", table, re.M)}
    assert sorted(rows) == list(range(1, 36))
    for number, how in rows.items():
        assert how.strip().startswith(("rule", "rules", "fact", "facts", "check", "checks", "schema",
                                       "signature", "guidance only")), (number, how)


def test_the_shipped_rehearsal_file_uploads(tmp_path):
    from ticketagent.upload.parse import parse_batch

    data = kestrel.REHEARSAL.read_bytes()
    parsed = parse_batch(data, "rehearsal-kestrel.csv")
    assert parsed.ok and len(parsed.rows) == 40
    assert {row.expected["status"] for row in parsed.rows} == {"pending", "solved", "escalated", "none"}
    with kestrel.REHEARSAL.open(encoding="utf-8", newline="") as f:
        assert "expected_status" in next(csv.reader(f))
