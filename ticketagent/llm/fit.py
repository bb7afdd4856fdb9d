"""Prompts built within the model's context (`context.Context`), and whether a playbook's can be.

A step's prompt is the instructions with the playbook's guidance (and, to
triage, its categories) -- always whole -- and the ticket; the answer's
tokens are kept free. What gives way, in this order:

- the knowledge tool's articles: the ticket's category's first (an article
  tagged with it, or naming it in its title), then the others as room allows;
  one that does not fit whole is cut, the rest left out;
- the ticket's text: cut at the end (and said so) to what is left.

A prompt that does not fit even so is not sent: the step fails with kind
"context" and the numbers. Publishing checks the same first
(`playbook_needs`): a version whose prompts cannot fit is refused, saying
how many tokens it needs and how many the model holds.
"""

from __future__ import annotations

import json

from ticketagent.llm.base import ModelError
from ticketagent.llm.context import MESSAGE_TOKENS, Context, messages_tokens, tokens_estimate
from ticketagent.llm.prompts import (
    TOOL_SPECS,
    decide_prompt,
    decide_user,
    draft_prompt,
    draft_user,
    ticket_text,
    triage_prompt,
)
from ticketagent.llm.schemas import Reply, Triage
from ticketagent.playbooks.spec import PlaybookSpec

TICKET_ROOM = 256  # tokens a prompt keeps for a ticket's subject and text (a longer one is cut to fit)
CUT = " […]"  # the end of a text cut to fit


def too_long(needs: int, context: Context, what: str = "the prompt") -> ModelError:
    return ModelError("context", f"{what} needs {needs:,} tokens ({needs - context.answer_tokens:,} for the "
                                 f"prompt, {context.answer_tokens:,} kept for the answer); {context.who} holds "
                                 f"{context.tokens:,}")


def text_cut(text: str, tokens: int) -> str:
    """`text`, cut at the end (with CUT) to at most `tokens` by the estimate; "" when nothing fits."""
    if tokens_estimate(text) <= tokens:
        return text
    low, high = 0, len(text)  # the longest prefix that fits with the mark
    while low < high:
        mid = (low + high + 1) // 2
        if tokens_estimate(text[:mid] + CUT) <= tokens:
            low = mid
        else:
            high = mid - 1
    return text[:low].rstrip() + CUT if low else ""


def messages_fit(messages: list[dict], ticket: dict, user, context: Context | None, tools=None) -> list[dict]:
    """`messages` (the system prompt) and the user's message `user(ticket)`, its ticket cut to fit the context
    (ModelError "context" when the prompt does not fit even with the ticket's text left out)."""
    whole = [*messages, {"role": "user", "content": user(ticket)}]
    if context is None:
        return whole
    over = messages_tokens(whole, tools) - context.prompt_tokens
    if over <= 0:
        return whole
    body_tokens = tokens_estimate(ticket.get("body") or "")
    cut = [*messages, {"role": "user", "content": user({**ticket, "body": text_cut(ticket.get("body") or "",
                                                                                    body_tokens - over)})}]
    needs = messages_tokens(cut, tools)
    if needs > context.prompt_tokens:
        raise too_long(messages_tokens(whole, tools) + context.answer_tokens, context)
    return cut


def _related(article: dict, category: str) -> bool:
    if not category:
        return False
    tags = [str(t).casefold() for t in article.get("tags") or ()]
    return category.casefold() in tags or category.casefold() in str(article.get("title", "")).casefold()


def results_fit(result, room: int, *, category: str = "") -> str:
    """A tool's result as its message's text, at most `room` tokens: a list keeps its entries in order (articles
    of the ticket's `category` first) while they fit, the first one that does not cut to what is left."""
    text = json.dumps(result, ensure_ascii=False, default=str)
    if tokens_estimate(text) <= room or not isinstance(result, list):
        return text if tokens_estimate(text) <= room else text_cut(text, room)
    entries = sorted(result, key=lambda e: not (isinstance(e, dict) and _related(e, category)))
    kept: list = []
    for entry in entries:
        left = room - tokens_estimate(json.dumps(kept, ensure_ascii=False, default=str)) - 2
        if tokens_estimate(json.dumps(entry, ensure_ascii=False, default=str)) <= left:
            kept.append(entry)
        elif isinstance(entry, dict) and isinstance(entry.get("body"), str):
            shell = tokens_estimate(json.dumps({**entry, "body": ""}, ensure_ascii=False, default=str))
            body = text_cut(entry["body"], left - shell)
            if body:
                kept.append({**entry, "body": body})
            break
        else:
            break
    return json.dumps(kept, ensure_ascii=False, default=str)


def tool_room(messages: list[dict], context: Context | None, tools) -> int | None:
    """What a tool's result may take of the prompt now (None: no limit)."""
    if context is None:
        return None
    return context.prompt_tokens - messages_tokens(messages, tools) - MESSAGE_TOKENS


def playbook_needs(spec: PlaybookSpec, context: Context) -> tuple[int, str]:
    """(the most tokens one of `spec`'s prompts needs, which step's): its instructions, guidance and
    categories whole, TICKET_ROOM for a ticket's text, the longest answer the draft may give (to decide on it),
    and the answer's tokens."""
    ticket = {"ticket_id": "", "subject": "", "body": "", "priority": "normal", "language": "en"}
    triage = Triage(category=max((c.name for c in spec.categories), key=len), priority="normal",
                    sentiment="neutral", language="en", summary="-")
    reply = Reply(subject="-", body="-")
    prompts = {
        "triage": (triage_prompt(spec, ticket), ticket_text(ticket), None, 0),
        "draft": (draft_prompt(spec, ticket), draft_user(ticket, triage), TOOL_SPECS, 0),
        "decide": (decide_prompt(spec, ticket), decide_user(ticket, triage, reply), None, context.answer_tokens),
    }
    needs = {step: messages_tokens([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                   tools) + TICKET_ROOM + extra + context.answer_tokens
             for step, (system, user, tools, extra) in prompts.items()}
    step = max(needs, key=needs.get)
    return needs[step], step


def playbook_fit_problem(spec: PlaybookSpec, context: Context | None) -> str:
    """Why `spec`'s prompts cannot fit the model's context, with the numbers ("" when they fit)."""
    if context is None:
        return ""
    needs, step = playbook_needs(spec, context)
    if needs <= context.tokens:
        return ""
    return (f"its prompts do not fit the model: the {step} step needs {needs:,} tokens, {context.who} holds "
            f"{context.tokens:,} ({context.answer_tokens:,} kept for the answer and {TICKET_ROOM:,} for the "
            f"ticket's text; the tokens are estimated). Shorten the guidance or the categories' descriptions, "
            f"or serve the model with a larger context")
