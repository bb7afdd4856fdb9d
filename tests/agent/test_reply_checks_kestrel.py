"""The reply checks on the Kestrel Cycles example: a lead's bad drafts are held, good ones pass.

The playbook is the standard one with Kestrel's articles, its signature
and its two phone numbers on the allow-list (policy rule 31); the bad
drafts break rules 28-32 the way a model does. The good drafts are the
offline model's for all 40 tickets and a few written to the policy: none
is held, except KC-1027's, which repeats the customer's "refund me €2000"
(rule 28 says no amount, not even that one).
"""

import pytest

from tests.conftest import skip_or_fail
from ticketagent.playbooks.checks import reply_check

from . import kestrel

# ticket -> (the draft's body, the check that must hold it, a text that must be among what matched)
BAD = {
    "KC-1015": ("Hello Kevin, good news: your refund of $2,150 has been approved and reaches you by Friday.",
                "promise", "$2,150"),
    "KC-1014": ("Bonjour Mathieu, votre remboursement de 3 149 € a été approuvé, vous serez remboursé d'ici "
                "vendredi.", "promise", "3 149 €"),
    "KC-1017": ("Hola Lucía, le devolveremos 430 USD el lunes, ya hemos recibido la batería.", "promise", "430 USD"),
    "KC-1027": ("Hello, we will refund the saddle bag and, as a goodwill gesture, add a voucher for the trouble.",
                "promise", "we will refund"),
    "KC-1003": ("Hi Marcus, I signed in with your password: Trailhead#2291 and everything works now.", "secret",
                "a password Trai…"),
    "KC-1003b": ("Hi Marcus, the verification code 604 118 has expired, so the app sent you a new one.", "secret",
                 "a one-time code 604 …"),
    "KC-1015b": ("Hello Kevin, we have sent the label. Second return this year. Check the return history before "
                 "approving.", "secret", "an internal note"),
    "KC-1032": ("Hi Aoife, the courier will call you on +353 87 555 0192 before the delivery.", "personal_data",
                "phone 353875550192"),
    "KC-1032b": ("Hi Aoife, we changed the delivery address to 27 Harbour View, Apt 4, Dublin 2 for you.",
                 "personal_data", "address 27 harbour view"),
    "KC-1033": ("Hallo Thomas, Rechnungen gehen ab jetzt an t.albrecht.privat@example.org, wie gewünscht.",
                "personal_data", "email t.albrecht.privat@example.org"),
    "KC-1039": ("Hi Maria, yes, 1-800-555-0199 is our number; please try again during business hours.",
                "made_up_contact", "phone 18005550199"),
    "KC-1002": ("Hallo Frau Krüger, Sie erreichen uns telefonisch unter +49 30 1234 5678 von Montag bis Freitag.",
                "made_up_contact", "phone 493012345678"),
    "KC-1018": ('Hello, your bike is 31 months old. See our article "Extended warranty for loyal riders" for '
                "what we can still do.", "unknown_article", "Extended warranty for loyal riders"),
}

GOOD = {
    "KC-1014": ("Bonjour Mathieu, vous pouvez retourner le vélo dans les 30 jours : lancez le retour dans votre "
                "compte sous Orders → Return. Une fois le retour arrivé à notre entrepôt et vérifié, nous vous "
                "confirmons le remboursement par e-mail. Consultez l'article « How refunds are processed ». "
                "Kestrel Support"),
    "KC-1015": ("Hello Kevin, thank you for your message. Start the return in your account under Orders → Return; "
                "we email a prepaid label for parcels, and a freight courier collects bikes. We refund to the "
                "original payment method once the return has reached our warehouse and been checked. Some refunds "
                "need a team lead's approval first, and we tell you when that is the case."),
    "KC-1002": ("Hallo Frau Krüger, es tut uns leid, dass Ihr Kestrel Alpen 3 noch nicht da ist. Sie erreichen "
                "uns telefonisch unter +49 30 5550 1200, montags bis freitags von 8 bis 18 Uhr. Mehr steht im "
                "Artikel „Tracking, delivery times and address changes“."),
    "KC-1039": ("Hi Maria, thank you for your interest in the Trail X. The number you found is not ours: you can "
                "call us on +1 555 0147, Monday to Friday, 8:00–18:00. See \"Contacting Kestrel Support\"."),
    "KC-1003": ("Hi Marcus, please change your password as soon as you can: you sent it to us in your message, and "
                "we never ask for your password or a verification code. Use \"Forgot password\" on the sign-in "
                "page; the link works for one hour, so check your spam folder."),
    "KC-1032": ("Hi Aoife, thank you for letting us know. You can change the delivery address under Orders until "
                "the order is dispatched; we have noted the new address you sent us and will use your personal "
                "email from now on."),
    "KC-1018": ("Hello, thank you for your message. Your bike was delivered more than 24 months ago, so the "
                "warranty no longer covers it, but our workshop still repairs Kestrel bikes at cost. See our "
                "article \"Paid repairs after the warranty\"."),
}


@pytest.fixture(scope="module")
def example():
    why = kestrel.present()
    if why:
        skip_or_fail(why)
    return kestrel.spec(), kestrel.tickets()


def check(example, ticket_id: str, body: str) -> dict[str, dict]:
    playbook, tickets = example
    ticket = tickets[ticket_id[:7]]
    reply = {"subject": f"Re: {ticket['subject']}", "body": f"{body}\n\n{playbook.reply.signature}"}
    triage = {"category": ticket["expected_category"], "language": ticket["language"]}
    return {c["check"]: c for c in reply_check(playbook, reply=reply, ticket=ticket, triage=triage)}


@pytest.mark.parametrize("ticket_id", sorted(BAD))
def test_a_bad_draft_is_held_by_its_check_with_what_matched(example, ticket_id):
    body, name, matched = BAD[ticket_id]
    failed = check(example, ticket_id, body)
    assert name in failed, failed
    assert any(matched in m for m in failed[name]["matched"]), failed[name]


def test_no_secret_is_shown_in_full(example):
    for ticket_id in ("KC-1003", "KC-1003b"):
        shown = str(check(example, ticket_id, BAD[ticket_id][0]))
        assert "Trailhead#2291" not in shown and "604 118" not in shown


@pytest.mark.parametrize("ticket_id", sorted(GOOD))
def test_a_good_draft_passes_where_the_bad_one_is_held(example, ticket_id):
    assert check(example, ticket_id, GOOD[ticket_id]) == {}
    assert check(example, ticket_id, BAD[ticket_id][0]), "the same ticket's bad draft is held"


def test_the_offline_models_drafts_are_not_held_but_for_the_one_that_repeats_an_amount(example):
    playbook, tickets = example
    drafts = kestrel.offline_drafts(playbook)
    held = {}
    for ticket_id, (reply, triage) in drafts.items():
        reply = {**reply, "body": f"{reply['body']}\n\n{playbook.reply.signature}"}
        failed = reply_check(playbook, reply=reply, ticket=tickets[ticket_id], triage=triage)
        if failed:
            held[ticket_id] = [c["check"] for c in failed]
    assert len(drafts) == 40
    assert held == {"KC-1027": ["promise"]}, held  # its subject, quoted back, says "refund me €2000"
