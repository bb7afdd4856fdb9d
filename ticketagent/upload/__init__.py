"""Parse an uploaded batch of support tickets (CSV or JSON Lines)."""
