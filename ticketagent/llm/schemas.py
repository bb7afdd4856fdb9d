"""The structured outputs a model must produce (validated with pydantic).

The action allow-list lives here: nothing a ticket says can add to it.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Category = Literal["billing", "account", "technical", "shipping", "feedback", "other"]
Priority = Literal["low", "normal", "high", "urgent"]
Sentiment = Literal["negative", "neutral", "positive"]
Action = Literal["save_draft", "notify_customer", "set_status", "close_ticket", "escalate"]
HelpdeskStatus = Literal["open", "pending", "solved", "escalated", "on_hold"]

ALLOWED_ACTIONS: tuple[str, ...] = Action.__args__  # type: ignore[attr-defined]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Triage(Strict):
    category: Category
    priority: Priority
    sentiment: Sentiment
    language: str = Field(max_length=16)
    summary: str = Field(max_length=1000)


class Reply(Strict):
    subject: str = Field(min_length=1, max_length=300)
    body: str = Field(min_length=1, max_length=10000)


class Decision(Strict):
    actions: list[Action] = Field(max_length=5)
    status: HelpdeskStatus | None = None
    reason: str = Field(default="", max_length=1000)
