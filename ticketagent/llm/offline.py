"""The offline model: deterministic rules that produce the same schemas, so the demo and most tests need no network.

It follows the playbook too: a ticket's category is the first whose
keywords it mentions (whole words, any case or accent: "down" is not in
"download"; else `other`, else the last category), its priority the
category's -- neither the priority the customer picked nor words in the
text ("URGENT", "mark as urgent") change it: the playbook's rules decide
the priority --, the facts the playbook asks for are read by pattern
(`playbooks.facts.facts_extract`; null where none is found), and its
reply quotes the best knowledge article for the category.
"""

import re

from ticketagent.llm.base import Tools, Usage, one_line_subject
from ticketagent.llm.schemas import Decision, Reply, Triage, triage_schema
from ticketagent.playbooks.checks import language_detect
from ticketagent.playbooks.facts import facts_extract
from ticketagent.playbooks.spec import PlaybookSpec
from ticketagent.playbooks.standard import standard_spec
from ticketagent.playbooks.words import phrase_first

# Only the customer's own request closes a ticket (and closing still needs
# "allow automatic close" or an operator's approval).
_CLOSE_REQUESTS = ("close this ticket", "close my ticket", "you can close", "ticket can be closed",
                   "ticket schließen", "fermer ce ticket", "cerrar este ticket", "关闭工单", "クローズしてください")


_NEGATIVE = ("angry", "terrible", "unacceptable", "worst", "disappointed", "frustrated", "refund*", "broken")

# A short reply in the ticket's language; English quotes the best article (the articles are English).
_TEMPLATES = {
    "en": "Hello {name},\n\nthank you for contacting us about \"{subject}\".\n\n{hint}",
    "de": "Hallo {name},\n\nvielen Dank für Ihre Nachricht zu „{subject}“. Wir haben Ihre Anfrage erhalten und "
          "kümmern uns darum. Wir melden uns bei Ihnen, sobald wir eine Antwort für Sie haben.",
    "fr": "Bonjour {name},\n\nmerci pour votre message au sujet de « {subject} ». Nous avons bien reçu votre "
          "demande et nous nous en occupons. Nous revenons vers vous dès que nous avons une réponse pour vous.",
    "es": "Hola {name},\n\ngracias por su mensaje sobre «{subject}». Hemos recibido su solicitud y nos ocupamos "
          "de ella. Le escribiremos en cuanto tengamos una respuesta para usted.",
    "it": "Ciao {name},\n\ngrazie per il suo messaggio su «{subject}». Abbiamo ricevuto la sua richiesta e ce ne "
          "stiamo occupando. Le scriveremo non appena avremo una risposta per lei.",
    "pt": "Olá {name},\n\nobrigado pela sua mensagem sobre «{subject}». Recebemos o seu pedido e estamos a tratar "
          "dele. Vamos escrever-lhe assim que tivermos uma resposta para você.",
    "nl": "Hallo {name},\n\nbedankt voor uw bericht over „{subject}”. Wij hebben uw vraag ontvangen en zijn ermee "
          "bezig. Wij laten het u weten zodra wij een antwoord voor u hebben.",
    "zh": "{name}您好，\n\n感谢您就“{subject}”联系我们。我们已经收到您的请求，正在处理中，有结果后会尽快回复您。",
    "ja": "{name}様\n\n「{subject}」についてお問い合わせいただきありがとうございます。ご依頼を受け付けました。"
          "確認でき次第ご連絡いたします。",
}


LANGUAGES = frozenset(_TEMPLATES)  # the languages it writes; any other reply is drafted in English


def writes(language: str) -> bool:
    """Whether the offline model drafts a reply in `language` (a code such as "ru" or "pt-BR")."""
    return language.lower().replace("_", "-").split("-")[0] in LANGUAGES


class OfflineModel:
    label = "offline model"

    @staticmethod
    def context() -> None:
        """No context to fit: the rules read the whole ticket."""
        return None

    def triage(self, ticket: dict, *, playbook: PlaybookSpec | None = None, usage: Usage | None = None,
               allowance=None) -> Triage:
        spec = playbook or standard_spec()
        text = f"{ticket['subject']}\n{ticket['body']}"
        fallback = spec.category("other") or spec.categories[-1]
        category = next((c for c in spec.categories if phrase_first(text, c.keywords)), fallback)
        sentiment = "negative" if phrase_first(text, _NEGATIVE) else (
            "positive" if category.name == "feedback" else "neutral")
        first = re.sub(r"\s+", " ", ticket["body"]).strip()[:160]
        fields = {"category": category.name, "priority": category.priority, "sentiment": sentiment,
                  "language": (ticket.get("language") or language_detect(text, min_words=1) or "und")[:16],
                  "summary": first or ticket["subject"][:160]}
        facts = spec.extracted_facts()
        if not facts:
            return Triage(**fields)
        values, _ = facts_extract(spec, ticket)
        return triage_schema(tuple(c.name for c in spec.categories), facts).model_validate({**fields, "facts": values})

    def draft(self, ticket: dict, triage: Triage, tools: Tools, *, playbook: PlaybookSpec | None = None,
              usage: Usage | None = None, allowance=None) -> Reply:
        spec = playbook or standard_spec()
        language = spec.reply.language if spec.reply.language != "ticket" else (ticket.get("language") or "en")
        template = _TEMPLATES.get(language.lower().split("-")[0], _TEMPLATES["en"])
        hint = "We are looking into it and will get back to you shortly."
        if template is _TEMPLATES["en"]:
            answers = tools.run("knowledge_base", {"query": f"{triage.category} {ticket['subject']}"})
            if isinstance(answers, list) and answers:
                hint = answers[0].get("body") or answers[0].get("answer") or hint
        name = ticket.get("customer_name") or "there"
        body = template.format(name=name, subject=ticket["subject"], hint=hint)
        return one_line_subject(Reply(subject=f"Re: {ticket['subject']}"[:300], body=body))

    def decide(self, ticket: dict, triage: Triage, reply: Reply, *, playbook: PlaybookSpec | None = None,
               usage: Usage | None = None, allowance=None) -> Decision:
        actions = ["save_draft", "notify_customer", "set_status"]
        if triage.priority == "urgent" or triage.sentiment == "negative" and triage.category == "billing":
            return Decision(actions=actions + ["escalate"], status="escalated",
                            reason=f"{triage.priority} {triage.category} ticket: a person should follow up")
        text = f"{ticket['subject']}\n{ticket['body']}"
        if phrase_first(text, _CLOSE_REQUESTS):
            return Decision(actions=actions + ["close_ticket"], status="solved",
                            reason="the customer asked to close the ticket")
        if triage.category == "feedback":
            return Decision(actions=actions, status="solved", reason="feedback answered; nothing left to do")
        return Decision(actions=actions, status="pending", reason="answered; waiting for the customer")
