"""Facts, conditions and rule outputs of playbook format 3, as plain code on tickets and decisions.

Each case is what a policy says and the old rules could not: whole words
("down" is not "download"), accents, money with its currency, dates,
any-of / none-of, decided actions, the priority, the status, exactly one
of, no reply, a queue and an owner per rule, a hold with its reason. A bad
playbook names what is wrong and where, and writes nothing.
"""

import pytest

from ticketagent.llm.offline import OfflineModel
from ticketagent.playbooks.conditions import condition_parse
from ticketagent.playbooks.policy import facts_for
from ticketagent.playbooks.rules import decision_review, triage_review
from ticketagent.playbooks.spec import PlaybookInvalid, spec_validate
from ticketagent.playbooks.standard import standard_spec

FACTS = [
    {"name": "order_total", "source": "metadata.order_total", "type": "money", "currency": "metadata.currency"},
    {"name": "months", "source": "metadata.months", "type": "number"},
    {"name": "delivered", "source": "metadata.delivered", "type": "date"},
    {"name": "plan", "source": "metadata.plan", "type": "one_of", "options": ["care", "regular"],
     "default": "regular"},
    {"name": "asked", "source": "extract", "type": "money", "description": "an amount the customer asks for"},
    {"name": "fixed", "source": "extract", "type": "yes_no", "cues": {"en": ["works now"]}},
]
WORDS = {"outage": {"en": ["down", "outage*"], "de": ["ausgefallen"]}, "legal": {"fr": ["avocat"]}}


def spec(rules=(), **changes):
    data = {**standard_spec().model_dump(mode="json"), "name": "Conditions", "facts": FACTS, "words": WORDS,
            "rules": list(rules), **changes}
    return spec_validate(data)


def ticket(body="Hello", subject="Question", **metadata):
    return {"ticket_id": "T-1", "customer_email": "a@example.com", "customer_name": "A", "subject": subject,
            "body": body, "priority": "", "language": "en", "metadata": metadata}


def holds(line: str, t: dict, playbook=None, decided=None) -> bool:
    playbook = playbook or spec()
    triage = triage_review(playbook, ticket=t, triage=OfflineModel().triage(t, playbook=playbook).model_dump())
    facts = facts_for(playbook, ticket=t, triage=triage, decided=decided)
    return condition_parse(line).holds(facts, playbook.words)


class TestConditions:
    def test_words_match_whole_words_in_any_case_or_accent(self):
        assert holds("ticket.text mentions outage", ticket("The site is DOWN again"))
        assert not holds("ticket.text mentions outage", ticket("The download is slow"))
        assert holds("ticket.text mentions outage", ticket("Outages all week"))  # outage*
        assert holds("ticket.text mentions outage", ticket("Der Server ist AUSGEFALLEN"))
        assert holds("ticket.text mentions legal", ticket("Mon AVOCÂT vous écrira"))
        assert holds("ticket.body contains down", ticket("Download"))  # contains stays a substring test

    def test_money_compares_in_its_own_currency(self):
        assert holds("order_total > 400 EUR", ticket(order_total=400.01, currency="EUR"))
        assert not holds("order_total > 400 EUR", ticket(order_total=400.0, currency="EUR"))
        assert not holds("order_total > 400 EUR", ticket(order_total=900, currency="USD"))
        assert holds("order_total > 400", ticket(order_total="2,349.00", currency="USD"))
        assert not holds("order_total > 400 EUR", ticket())  # missing: never true
        assert holds("order_total is missing", ticket())

    def test_numbers_dates_and_one_of(self):
        assert holds("months > 24", ticket(months=31)) and not holds("months > 24", ticket(months="24"))
        assert holds("delivered < 2025-06-01", ticket(delivered="2025-05-31"))
        assert not holds("delivered < 2025-06-01", ticket(delivered="soon"))
        assert holds("plan is regular", ticket()) and holds("plan is care", ticket(plan="Care"))

    def test_extracted_facts_come_from_the_message_and_say_when_not_found(self):
        t = ticket("Refund me €2,000 now, it works now")
        assert holds("asked > 1999 EUR", t) and holds("fixed is yes", t)
        assert holds("asked is missing", ticket("Hello")) and holds("fixed is missing", ticket("Hello"))
        triage = OfflineModel().triage(ticket("Hello"), playbook=spec()).model_dump()
        assert triage["facts"] == {"asked": None, "fixed": None}

    def test_decided_actions_are_facts(self):
        t = ticket()
        assert holds("decided has escalate", t, decided={"actions": ["escalate"], "status": None})
        assert holds("decided lacks close_ticket", t, decided={"actions": ["escalate"], "status": None})
        assert holds("always", t)


def decide(playbook, t, actions, status="pending", priority="normal"):
    model = OfflineModel().triage(t, playbook=playbook).model_dump()
    triage = triage_review(playbook, ticket=t, triage={**model, "priority": priority})
    reply = {"subject": "Re: Question", "body": "Hello A, thank you for your message. We will look into it.\n\n"
             "Best regards,\nSupport team"}
    return triage, decision_review(playbook, ticket=t, triage=triage, reply=reply,
                                   decision={"actions": actions, "status": status, "reason": "model"})


class TestOutputs:
    def test_priority_set_then_bounded_by_rules_over_the_model(self):
        playbook = spec([
            {"name": "Table", "when": ["always"], "priority": "low"},
            {"name": "Outage", "when": ["ticket.text mentions outage"], "priority_at_least": "high"},
            {"name": "Never urgent", "when": ["always"], "priority_at_most": "high"},
        ])
        triage, _ = decide(playbook, ticket("It is down"), ["save_draft"], priority="urgent")
        assert triage["priority"] == "high" and triage["decided_by"]["priority"] == "Outage"
        triage, _ = decide(playbook, ticket("A download question"), ["save_draft"], priority="urgent")
        assert triage["priority"] == "low" and triage["model"] == {"priority": "urgent"}

    def test_status_exactly_one_no_reply_queue_owner_and_hold(self):
        playbook = spec([
            {"name": "Legal", "when": ["ticket.text mentions legal"], "require": ["escalate"],
             "escalate_to": {"rt_queue": "finance-legal", "rt_owner": "lena"}, "approve": ["notify_customer"],
             "hold_reason": "a lead approves legal replies"},
            {"name": "Escalated", "when": ["decided has escalate"], "status": "escalated",
             "forbid": ["close_ticket"]},
            {"name": "One of", "when": ["always"], "exactly_one_of": ["set_status", "close_ticket"]},
            {"name": "Never solved", "when": ["always"], "status_forbidden": ["solved"]},
        ])
        everything = ["save_draft", "notify_customer", "set_status", "close_ticket"]
        _, out = decide(playbook, ticket("Mon avocat"), everything, status="solved")
        assert out["actions"] == ["save_draft", "notify_customer", "set_status", "escalate"]
        assert out["status"] == "escalated" and out["decided_by"]["status"] == "Escalated"
        assert out["escalate_to"] == {"rt_queue": "finance-legal", "rt_owner": "lena"}
        assert out["held"] == {"notify_customer": "rule \u201cLegal\u201d: a lead approves legal replies"}
        _, out = decide(playbook, ticket("Close this ticket"), everything, status="solved")
        assert out["actions"] == ["save_draft", "notify_customer", "set_status"]  # the first of the set stays
        assert out["status"] == "pending" and out["chosen_status"] == "solved"
        quiet = spec([{"name": "Quiet", "when": ["always"], "no_reply": True, "require": ["close_ticket"],
                       "forbid": ["set_status"]}])
        _, out = decide(quiet, ticket(), ["save_draft", "notify_customer", "set_status"])
        assert out["actions"] == ["close_ticket"] and out["status"] is None and out["held"] == {}


class TestBadInput:
    @pytest.mark.parametrize(("change", "error"), [
        ({"rules": [{"name": "R", "when": ["order_totl > 400 EUR"], "forbid": ["escalate"]}]},
         "rules[0].when[0]: unknown field 'order_totl'"),
        ({"rules": [{"name": "R", "when": ["months > soon"], "forbid": ["escalate"]}]},
         "rules[0].when[0]: 'months > soon': '>' compares with a number"),
        ({"rules": [{"name": "R", "when": ["ticket.text mentions legl"], "forbid": ["escalate"]}]},
         "rules[0].when[0]: unknown word list 'legl'"),
        ({"rules": [{"name": "R", "when": ["always"], "category": "nope"}]}, "rules[0].category: unknown category"),
        ({"rules": [{"name": "R", "when": ["decided has escalate"], "priority": "high"}]},
         "rules[0]: a rule that sets the category or the priority is applied at triage"),
        ({"facts": [*FACTS, {"name": "kind", "type": "one_of", "source": "extract"}]},
         "facts[6]: fact 'kind' is one_of: list its options"),
        ({"facts": [{"name": "x", "source": "metadata"}]}, "facts[0].source"),
        ({"format": 4}, "format"),
    ])
    def test_an_error_names_what_and_where(self, change, error):
        with pytest.raises(PlaybookInvalid) as caught:
            spec(**change)
        assert any(e.startswith(error) or error in e for e in caught.value.errors), caught.value.errors

    def test_format_2_files_load_as_they_were(self):
        data = {**standard_spec().model_dump(mode="json"), "format": 2, "name": "Old"}
        for key in ("facts", "words"):
            data.pop(key)
        data["rules"] = [{"name": "No close", "when": ["category is billing"], "forbid": ["close_ticket"]}]
        loaded = spec_validate(data)
        assert loaded.format == 3 and loaded.facts == [] and loaded.rules[0].forbid == ["close_ticket"]
