"""The offline model: deterministic rules that produce the same schemas, so the demo and most tests need no network."""

import re

from ticketagent.llm.base import Tools, one_line_subject
from ticketagent.llm.schemas import Decision, Reply, Triage

_CATEGORY_WORDS = [
    ("billing", ("refund", "invoice", "charge", "payment", "billing",
                 "rechnung", "factura", "facture", "退款", "請求")),
    ("account", ("password", "login", "log in", "account",
                 "passwort", "mot de passe", "contraseña", "密码", "パスワード")),
    ("technical", ("error", "bug", "crash", "outage", "down", "broken",
                   "fehler", "erreur", "故障", "エラー")),
    ("shipping", ("shipping", "delivery", "package", "parcel", "tracking",
                  "lieferung", "livraison", "envío", "快递", "配送")),
    ("feedback", ("thank", "great", "love", "suggestion", "danke", "merci", "gracias", "谢谢", "ありがとう")),
]


# Only the customer's own request closes a ticket (and closing still needs
# "allow automatic close" or an operator's approval).
_CLOSE_REQUESTS = ("close this ticket", "close my ticket", "you can close", "ticket can be closed",
                   "ticket schließen", "fermer ce ticket", "cerrar este ticket", "关闭工单", "クローズしてください")


_URGENT = ("urgent", "asap", "immediately", "outage", "down", "dringend", "urgente", "紧急", "至急")


_NEGATIVE = ("angry", "terrible", "unacceptable", "worst", "disappointed", "frustrated", "refund", "broken")


class OfflineModel:
    label = "offline model"

    def triage(self, ticket: dict) -> Triage:
        text = f"{ticket['subject']}\n{ticket['body']}".lower()
        category = next((c for c, words in _CATEGORY_WORDS if any(w in text for w in words)), "other")
        priority = ticket.get("priority") or "normal"
        if any(w in text for w in _URGENT):
            priority = "urgent" if priority in ("high", "urgent") else "high"
        sentiment = "negative" if any(w in text for w in _NEGATIVE) else (
            "positive" if category == "feedback" else "neutral")
        first = re.sub(r"\s+", " ", ticket["body"]).strip()[:160]
        return Triage(category=category, priority=priority, sentiment=sentiment,
                      language=(ticket.get("language") or "und")[:16], summary=first or ticket["subject"][:160])

    def draft(self, ticket: dict, triage: Triage, tools: Tools) -> Reply:
        answers = tools.run("knowledge_base", {"query": triage.category})
        hint = answers[0]["answer"] if isinstance(answers, list) and answers else \
            "We are looking into it and will get back to you shortly."
        name = ticket.get("customer_name") or "there"
        body = (f"Hello {name},\n\nthank you for contacting us about \"{ticket['subject']}\".\n\n"
                f"{hint}\n\nBest regards,\nSupport team")
        return one_line_subject(Reply(subject=f"Re: {ticket['subject']}"[:300], body=body))

    def decide(self, ticket: dict, triage: Triage, reply: Reply) -> Decision:
        actions = ["save_draft", "notify_customer", "set_status"]
        if triage.priority == "urgent" or triage.sentiment == "negative" and triage.category == "billing":
            return Decision(actions=actions + ["escalate"], status="escalated",
                            reason=f"{triage.priority} {triage.category} ticket: a person should follow up")
        text = f"{ticket['subject']}\n{ticket['body']}".lower()
        if any(phrase in text for phrase in _CLOSE_REQUESTS):
            return Decision(actions=actions + ["close_ticket"], status="solved",
                            reason="the customer asked to close the ticket")
        if triage.category == "feedback":
            return Decision(actions=actions, status="solved", reason="feedback answered; nothing left to do")
        return Decision(actions=actions, status="pending", reason="answered; waiting for the customer")
