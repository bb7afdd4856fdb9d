"""Synthetic ticket batches for the kill test and the benchmarks."""

import random

from ticketagent.upload.rows import TicketRow

SUBJECTS = [
    ("Refund for invoice {n}", "I was charged twice for invoice {n}. Please refund one payment."),
    ("Cannot log in", "My password reset link does not work, account {n} is locked."),
    ("Thanks!", "Great support last week, thank you so much. You can close this ticket."),
    ("Site down, urgent", "Your service is down since this morning, this is urgent."),
    ("Where is my package", "Tracking for order {n} has not moved in a week."),
]


def ticket_rows(n: int, prefix: str, rng: random.Random) -> list[TicketRow]:
    rows = []
    for i in range(1, n + 1):
        subject, body = rng.choice(SUBJECTS)
        rows.append(TicketRow(row=i + 1, ticket_id=f"{prefix}-{i}", customer_email=f"{prefix.lower()}-{i}@example.com",
                              subject=subject.format(n=i), body=body.format(n=i), customer_name=f"Customer {i}"))
    return rows
