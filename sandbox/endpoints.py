"""The names the sandbox counts and faults by: its HTTP write endpoints and ``email``.

Each HTTP write endpoint accepts one method; ``email`` is a message taken by
the SMTP listener. ``*`` stands for any endpoint in the fault maps.
"""

#: HTTP write endpoints and the method each one accepts.
ENDPOINT_METHODS = {
    "draft": "PUT",
    "notify": "POST",
    "status": "POST",
    "close": "POST",
    "escalate": "POST",
}
WRITE_ENDPOINTS = tuple(ENDPOINT_METHODS)
#: All endpoint names usable in faults and counts.
ENDPOINTS = (*WRITE_ENDPOINTS, "email")
#: Wildcard endpoint name accepted in the per-endpoint fault maps.
ANY_ENDPOINT = "*"
