"""The reply checks a lead configures, one kind at a time: each holds what it is for and passes a normal reply.

Plain code on a spec and a draft (no database): promises and money,
secrets, the customer's personal data copied back, contact details off the
allow-list, cited article titles; what matched is in the result, a secret
masked. Old playbooks (format 1) still load, with the new checks on.
"""

import pytest

from ticketagent.playbooks.checks import reply_check
from ticketagent.playbooks.files import spec_from_text, spec_to_yaml
from ticketagent.playbooks.spec import FORMAT, PlaybookInvalid, spec_validate
from ticketagent.playbooks.standard import standard_spec

TICKET = {"ticket_id": "T-1", "customer_email": "dana@example.com", "customer_name": "Dana", "language": "en",
          "subject": "Refund for order 1043", "metadata": {},
          "body": "Hello, I returned the blender last week. When do I get my money back?"}
TRIAGE = {"category": "billing", "language": "en"}
GOOD = ("Hello Dana,\n\nthank you for letting us know. Once your return reaches our warehouse we check it and "
        "confirm the refund by email; your bank then needs a few business days to show it.")


def spec(**checks):
    data = standard_spec().model_dump(mode="json")
    data["checks"].update(checks)
    return spec_validate(data)


def failed(body: str, *, playbook=None, ticket=None) -> dict[str, dict]:
    result = reply_check(playbook or spec(), reply={"subject": "Re: your refund", "body": body},
                         ticket={**TICKET, **(ticket or {})}, triage=TRIAGE)
    return {c["check"]: c for c in result}


def test_a_normal_reply_passes_every_check_and_one_promise_more_is_held():
    assert failed(GOOD) == {}
    assert list(failed(GOOD + " Your refund has been approved.")) == ["promise"]


class TestPromises:
    @pytest.mark.parametrize("body", [
        "Hello Dana, good news: your refund of $2,880 has been approved and is on its way.",
        "Hello Dana, we will refund the blender in full as soon as possible, no questions asked.",
        "Hello Dana, as a goodwill gesture we'll send you a voucher for your next order with us.",
        "Hello Dana, the replacement will arrive by Friday, we checked with the warehouse for you.",
        "Hallo Dana, Ihre Erstattung wurde genehmigt, Sie erhalten das Geld bis Montag zurück.",
        "Hello Dana, thank you. We can offer EUR 40 off your next order for the trouble caused.",
    ])
    def test_a_promise_is_held_with_what_matched(self, body):
        check = failed(body)["promise"]
        assert check["matched"] and all(m in body for m in (check["matched"][0].strip("…"),))

    def test_the_matched_sentence_is_shown(self):
        check = failed("Hello Dana. Your refund of $2,880 has been approved. Thank you for your patience.")["promise"]
        assert check["matched"] == ["Your refund of $2,880 has been approved."]
        assert "“Your refund of $2,880 has been approved.”" in check["detail"]

    def test_explaining_the_process_is_not_a_promise(self):
        assert "promise" not in failed(GOOD + " Some refunds need a team lead's approval first.")
        assert "promise" in failed(GOOD + " Your team lead has approved the refund already.")

    def test_an_article_quoted_word_for_word_is_not_a_promise(self):
        article = standard_spec().articles[0].body  # "... within 5-7 business days once approved ..."
        assert "approved" in article and "promise" not in failed(f"Hello Dana,\n\n{article}")
        paraphrase = article.replace("once approved", "and yours has been approved")
        assert failed(f"Hello Dana,\n\n{paraphrase}")["promise"]["matched"][0].startswith("Refunds are issued")

    def test_the_customers_own_words_quoted_back_are_not_a_promise_but_an_amount_is(self):
        ticket = {"subject": "-50% discount code not applied", "body": "Refund me €2000 now or else."}
        quoted = 'Hello Dana, thank you for contacting us about "-50% discount code not applied". We are on it.'
        assert failed(quoted, ticket=ticket) == {}
        assert "promise" in failed(quoted + " Here is a new discount code for you.", ticket=ticket)
        assert "promise" in failed(quoted.replace("-50% discount code not applied", "Refund me €2000 now"),
                                   ticket=ticket), "an amount of money counts, whoever said it first"

    def test_a_lead_may_allow_amounts_and_turn_the_phrases_off(self):
        body = "Hello Dana, thank you for writing. Your order of $49.00 has been approved by our team."
        assert "promise" in failed(body)
        assert "promise" in failed(body, playbook=spec(money=False))  # "has been approved" still is
        assert "promise" not in failed(body, playbook=spec(money=False, promises=False))

    def test_the_phrases_are_the_leads(self):
        body = "Hello Dana, thank you for writing. We shall pay you back the whole amount very soon indeed."
        assert "promise" not in failed(body)
        assert "promise" in failed(body, playbook=spec(promise_phrases={"en": ["pay you back"]}))


class TestSecrets:
    @pytest.mark.parametrize(("body", "shown"), [
        ("Hello Dana, your new API key is sk-live-4f9a8b7c6d5e4f3a2b1c0d9e, keep it safe please.", "sk-l…"),
        ("Hello Dana, use the key AKIAIOSFODNN7EXAMPLE with the secret we gave you to connect.", "AKIA…"),
        ("Hello Dana, here is the token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 for the integration.", "ghp_…"),
        ("Hello Dana, the session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkw.dozjgNryP4J3jVmNHl0w5N was ended.",
         "eyJh…"),
        ("Hello Dana, your temporary password: Winter#2291, please change it when you first sign in.", "Wint…"),
        ("Hello Dana, I checked it: the verification code 604 118 is still valid for ten minutes.", "604 …"),
        ("Hello Dana, the reset token is 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.",
         "9f86…"),
    ])
    def test_a_secret_is_held_and_shown_masked(self, body, shown):
        check = failed(body)["secret"]
        secret = body.split()[-1] if shown == "9f86…" else None
        assert shown in check["detail"] and shown in " ".join(check["matched"])
        assert secret is None or secret.rstrip(".") not in check["detail"]
        for word in body.split():
            if len(word) > 12 and word[:4] == shown[:4]:
                assert word.rstrip(".,") not in str(check), "the secret is not repeated in full"

    def test_talking_about_passwords_and_codes_is_not_a_secret(self):
        body = ("Hello Dana, reset your password from the sign-in page with \"Forgot password\". A password is "
                "required to sign in, and we never ask for your password or a verification code.")
        assert failed(body) == {}
        assert "secret" in failed(body.replace("A password is required", "Your password is Dana#1987"))

    def test_an_internal_note_of_the_ticket_is_held(self):
        note = "Second return this year. Check the return history before approving."
        ticket = {"metadata": {"internal_note": note}}
        check = failed(GOOD + " Second return this year.", ticket=ticket)["secret"]
        assert "internal note" in check["detail"]
        assert "secret" not in failed(GOOD, ticket=ticket)

    def test_the_playbooks_guidance_said_word_for_word_is_held(self):
        line = "Escalate urgent tickets, and angry customers with a billing problem: a person follows up."
        assert "guidance" in failed(f"{GOOD} {line}")["secret"]["detail"]


class TestPersonalData:
    TICKET = {"body": "Please send the new parts to 27 Harbour View, Apt 4, Dublin 2. My mobile is "
                      "+353 87 555 0192 and my personal address is aoife.b.home@example.org."}

    @pytest.mark.parametrize(("copied", "what"), [
        ("We will call you on +353 87 555 0192 if the courier needs you.", "phone 353875550192"),
        ("We will send the parts to 27 Harbour View, Apt 4, Dublin 2.", "address 27 harbour view"),
        ("We will write to aoife.b.home@example.org from now on.", "email aoife.b.home@example.org"),
        ("We will write to dana@example.com from now on.", "email dana@example.com"),
    ])
    def test_the_customers_own_data_copied_back_is_held(self, copied, what):
        check = failed(f"{GOOD} {copied}", ticket=self.TICKET)
        assert what in check["personal_data"]["matched"]

    def test_the_new_address_you_sent_us_passes(self):
        body = GOOD + " We have changed the delivery address to the new address you sent us."
        assert failed(body, ticket=self.TICKET) == {}
        copied = body.replace("the new address you sent us", "27 Harbour View")
        assert failed(copied, ticket=self.TICKET)["personal_data"]["matched"] == ["address 27 harbour view"]

    def test_a_street_address_in_german(self):
        ticket = {"body": "Neue Adresse: Beispielweg 12, 50667 Köln. Neue Handynummer: 0170 5550 3381"}
        body = GOOD + " Wir haben Ihre Adresse auf Beispielweg 12 geändert und rufen Sie unter +49 170 5550 3381 an."
        assert set(failed(body, ticket=ticket)["personal_data"]["matched"]) >= {"address beispielweg 12",
                                                                                "phone 4917055503381"}


class TestContactsAllowed:
    def test_a_number_from_the_ticket_is_not_a_source(self):
        ticket = {"body": "I found a number online, 1-800-555-0199, that's supposed to be yours. Is it?"}
        body = GOOD + " Yes, you can call us at 1-800-555-0199 during business hours."
        check = failed(body, ticket=ticket)
        assert check["made_up_contact"]["matched"] == ["phone 18005550199"]

    def test_only_the_allow_list_and_the_playbooks_own_text(self):
        playbook = spec(contacts_allowed=["+1 555 0147", "https://help.example.com", "help@example.com"])
        body = (GOOD + " You can call +1 555 0147, read https://help.example.com/refunds or write to "
                       "help@example.com.")
        assert failed(body, playbook=playbook) == {}
        check = failed(GOOD + " Or call +1 555 0199 or see https://other.example.net.", playbook=playbook)
        assert check["made_up_contact"]["matched"] == ["phone 15550199", "URL other.example.net"]

    def test_an_allow_list_entry_must_be_a_contact(self):
        with pytest.raises(PlaybookInvalid) as caught:
            spec(contacts_allowed=["call us"])
        assert caught.value.errors == ["checks.contacts_allowed: 'call us' is not a phone number, a link or an "
                                       "email address"]


class TestArticleTitles:
    def test_an_invented_title_is_held(self):
        body = GOOD + ' See our article "Refund Express for loyal customers" for the details.'
        check = failed(body)["unknown_article"]
        assert check["matched"] == ["Refund Express for loyal customers"]

    def test_a_real_title_in_any_quotation_marks_passes(self):
        for body in (GOOD + ' See our article "Refunds and invoices".', GOOD + " Voir l'article « Refunds and "
                     "invoices ».", GOOD + " Siehe den Artikel „refunds and invoices“."):
            assert "unknown_article" not in failed(body), body
            assert "unknown_article" in failed(body.replace("invoices", "invoices made simple")), body

    def test_a_quotation_that_cites_nothing_passes(self):
        body = 'Hello Dana, thank you for contacting us about "Refund for order 1043". ' + GOOD.split("\n\n")[1]
        assert failed(body) == {}
        assert "unknown_article" in failed(body.replace("contacting us about", "reading our guide"))


class TestFormat:
    def test_a_format_1_playbook_loads_with_the_new_checks_on(self):
        data = standard_spec().model_dump(mode="json")
        data["format"] = 1
        data["checks"] = {"min_chars": 40, "scaffolding": True, "made_up_contacts": False, "language": True}
        loaded = spec_validate(data)
        assert loaded.format == FORMAT == 3 and loaded.checks.made_up_contacts is False
        assert loaded.checks.promises and loaded.checks.money and loaded.checks.secrets
        assert loaded.checks.promise_phrases == standard_spec().checks.promise_phrases

    def test_a_written_file_reads_back_the_same(self):
        text = spec_to_yaml(standard_spec())
        assert "format: 3" in text and "{date}" in text
        assert spec_validate(spec_from_text(text)) == standard_spec()

    def test_a_phrase_list_needs_a_language(self):
        with pytest.raises(PlaybookInvalid) as caught:
            spec(promise_phrases={"english": ["refund"]})
        assert "checks.promise_phrases" in str(caught.value) and "'english' is not a language code" in str(caught.value)


def test_the_customers_whole_subject_quoted_back_gives_no_contact_but_a_number_from_it_alone_is_held():
    """A subject with numbers ("Question 0 (204817)") quoted back whole names the customer's ticket; before, its
    digits read as a phone number that is on no allow-list, and the reply was held."""
    subject = "Question 0 (204817)"
    quoted = reply_check(spec(), reply={"subject": f"Re: {subject}", "body": GOOD + f"\n\nAbout: {subject}"},
                         ticket={**TICKET, "subject": subject}, triage=TRIAGE)
    assert quoted == []
    alone = reply_check(spec(), reply={"subject": "Re: your question", "body": GOOD + " Call 0 (204817) today."},
                        ticket={**TICKET, "subject": subject}, triage=TRIAGE)
    assert "made_up_contact" in {c["check"] for c in alone}
