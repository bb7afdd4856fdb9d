"""A playbook's version page reads every rule whole: what it tests (all of, any of, none of, always) and
everything it decides, and each fact with its type and where its value comes from.

Before: the page wrote "When {when} → forbid/require/hold" only, so a rule that sets a priority, a status,
an escalation queue or says no reply read "When category is safety → " (nothing), and a rule with only
any_of read "When  → "."""

from ticketagent.playbooks.reading import fact_source, fact_type, rule_conditions, rule_outputs
from ticketagent.playbooks.spec import DECISION_OUTPUTS, TRIAGE_OUTPUTS, FactSpec, RuleSpec


def test_every_output_a_rule_can_have_is_said():
    rule = RuleSpec(name="all", when=["category is billing"], forbid=["close_ticket"], require=["escalate"],
                    approve=["notify_customer"], hold_reason="a lead approves refunds",
                    exactly_one_of=["set_status", "save_draft"], no_reply=True, status="pending",
                    status_allowed=["pending", "open"], status_forbidden=["solved"],
                    escalate_to={"rt_queue": "finance", "rt_owner": "ana", "zendesk_group": "Money"})
    said = "; ".join(rule_outputs(rule))
    assert said == ("no reply; forbid close_ticket; require escalate; exactly one of set_status or save_draft; "
                    "hold notify_customer for approval (a lead approves refunds); status pending; "
                    "status only pending or open; status never solved; "
                    "escalate to RT queue finance, RT owner ana, Zendesk group Money")
    triage = RuleSpec(name="t", when=["always"], category="billing", priority="high")
    assert rule_outputs(triage) == ["category billing", "priority high"]
    bounds = RuleSpec(name="b", any_of=["category is billing"], priority_at_least="high", priority_at_most="urgent")
    assert rule_outputs(bounds) == ["priority at least high", "priority at most urgent"]


ONE_OF_EACH = {"category": "billing", "priority": "high", "priority_at_least": "high", "priority_at_most": "low",
               "forbid": ["close_ticket"], "require": ["escalate"], "approve": ["notify_customer"],
               "exactly_one_of": ["set_status", "close_ticket"], "no_reply": True, "status": "pending",
               "status_allowed": ["open"], "status_forbidden": ["solved"], "escalate_to": {"rt_queue": "q"}}


def test_a_rule_that_decides_one_thing_says_it():
    """Every output a rule can have (spec.TRIAGE_OUTPUTS, DECISION_OUTPUTS): one that the page would not say
    fails here, a new kind of output included."""
    assert set(ONE_OF_EACH) == {*TRIAGE_OUTPUTS, *DECISION_OUTPUTS}
    for name, value in ONE_OF_EACH.items():
        assert len(rule_outputs(RuleSpec(name="one", when=["always"], **{name: value}))) == 1, name


def test_conditions_read_all_any_none_and_always():
    rule = RuleSpec(name="r", when=["ticket.text mentions return_request"],
                    any_of=["order_total > 400 EUR", "order_total > 450 USD"], none_of=["order_id is given"],
                    require=["escalate"])
    assert rule_conditions(rule) == ("ticket.text mentions return_request and any of (order_total > 400 EUR; "
                                     "order_total > 450 USD) and none of (order_id is given)")
    assert rule_conditions(RuleSpec(name="a", when=["always"], require=["save_draft"])) == "always"
    assert rule_conditions(RuleSpec(name="n", none_of=["category is spam"], require=["save_draft"])) \
        == "none of (category is spam)"


def test_facts_say_their_type_and_source():
    plan = FactSpec(name="plan", source="metadata.plan", type="one_of", options=["care", "regular"])
    assert (fact_type(plan), fact_source(plan)) == ("one of care, regular", "the ticket's field plan")
    total = FactSpec(name="order_total", source="metadata.order_total", type="money", currency="metadata.currency")
    assert fact_type(total) == "money (in the field currency)"
    amount = FactSpec(name="amount", type="money", currency="EUR")
    assert (fact_type(amount), fact_source(amount)) == ("money (EUR)", "the model reads it from the message")
    assert fact_type(FactSpec(name="ok", type="yes_no", source="extract")) == "yes or no"
    assert fact_source(FactSpec(name="lang", source="triage.language")) == "the triage's language"
    assert fact_source(FactSpec(name="subj", source="ticket.customer_email")) == "the ticket's customer email"
