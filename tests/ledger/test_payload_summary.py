"""The one-line payload summary a person sees in the review queue and on
blocked duplicates: the ticket, each field cut at 60 characters, the body
quoted and cut at 80, the whole at 300; a payload without a field map
shows as text. Payloads arrive as decoded JSON (persisted step outputs)."""

import json

from ticketagent.actions import payload_summary as summarize


def decoded(payload: dict) -> dict:
    return json.loads(json.dumps(payload))


class TestThePayloadSummary:
    def test_fields_then_the_quoted_body(self):
        payload = decoded({"ticket": "T-7", "body": {"action": "reply", "to": "ann@example.com",
                                                     "subject": "Re: refund", "body": "On its way."}})
        assert summarize(payload) == (
            "ticket T-7: action=reply, to=ann@example.com, subject=Re: refund, body='On its way.'")

    def test_fields_are_cut_at_60_and_the_body_at_80(self):
        payload = decoded({"ticket": "T-7", "body": {"subject": "s" * 61, "body": "b" * 81}})
        assert summarize(payload) == f"ticket T-7: subject={'s' * 60}, body='{'b' * 80}'"

    def test_a_field_map_without_a_body(self):
        assert summarize(decoded({"ticket": "T-7", "body": {"status": "solved"}})) == "ticket T-7: status=solved"

    def test_no_ticket_and_no_field_map(self):
        assert summarize(decoded({"status": "solved"})) == "ticket ?: status=solved"
        assert summarize(decoded({"ticket": "T-7", "body": "plain text"})) == "plain text"

    def test_the_whole_is_cut_at_300(self):
        payload = decoded({"ticket": "T-7", "body": {f"f{n}": "v" * 60 for n in range(10)}})
        summary = summarize(payload)
        assert len(summary) == 300 and summary.startswith("ticket T-7: f0=" + "v" * 60 + ", f1=")
        assert summarize({"body": "x" * 301}) == "x" * 300
