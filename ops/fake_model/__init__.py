"""The fake model (an OpenAI-compatible HTTP server) that the tests and the bench share: `server`, `answers`."""
