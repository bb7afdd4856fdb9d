"""The error an operator's or an editor's action raises when it cannot be applied: one class for every service."""


class ServiceError(Exception):
    """An operator action that cannot be applied; the message says why."""
