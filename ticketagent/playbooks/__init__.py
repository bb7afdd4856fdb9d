"""Playbooks: the team's agent as versioned data (guidance, categories, rules, reply settings, articles)."""
