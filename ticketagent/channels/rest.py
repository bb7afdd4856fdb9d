"""The generic REST contract (the sandbox speaks it): an `Idempotency-Key` on every write, `GET /api/lookup/{key}`.

For teams that put a service of their own in front of their helpdesk. Each
action is one request; the key travels in the `Idempotency-Key` header, and
a look-up answers 200 (found, with the write's id) or 404 (authoritatively
absent). `docs/channels.md` and `docs/sandbox.md` describe the API.
"""

from urllib.parse import quote

from django.conf import settings

from ledger.channels.base import Abilities, Channel, LookupResult, answered_at_all
from ledger.channels.http import Answer, HttpClient, NoAnswer, NotSent, call, write_outcome
from ticketagent.channels.identity import IdentityUnknown

# action -> (method, path); {ticket} is the ticket id from the upload
ROUTES = {
    "save_draft": ("PUT", "/api/tickets/{ticket}/draft"),
    "notify_customer": ("POST", "/api/tickets/{ticket}/notify"),
    "set_status": ("POST", "/api/tickets/{ticket}/status"),
    "escalate": ("POST", "/api/tickets/{ticket}/escalate"),
    "close_ticket": ("POST", "/api/tickets/{ticket}/close"),
}


class RestHelpdeskChannel(Channel):
    name = "helpdesk"
    label = "helpdesk REST API"
    abilities = Abilities(key_carried="Idempotency-Key header", honours_key=True,
                          lookup="GET /api/lookup/{key}")

    def __init__(self, base_url=None, token=None, connect_timeout=None, read_timeout=None):
        self.client = HttpClient(
            base_url or settings.HELPDESK_URL, system="the helpdesk",
            connect_timeout=connect_timeout or settings.HELPDESK_CONNECT_TIMEOUT,
            read_timeout=read_timeout or settings.HELPDESK_READ_TIMEOUT,
            token=token if token is not None else settings.HELPDESK_TOKEN, max_body=64 * 1024)

    @property
    def max_call_seconds(self) -> float:
        return self.client.max_call_seconds

    @property
    def in_flight_seconds(self) -> float:
        return float(settings.HELPDESK_UPSTREAM_TIMEOUT)

    def perform(self, spec, payload, key, deadline):
        method, path = ROUTES[spec.name]
        path = path.format(ticket=quote(str(payload["ticket"]), safe=""))
        answer = call(self.client, method, path, payload["body"], headers={"Idempotency-Key": key},
                      deadline=deadline)
        if not isinstance(answer, Answer):
            return answer
        data = answer.json({})
        ref = str(data.get("id", "")) if answer.ok and isinstance(data, dict) else ""
        return write_outcome(answer, system="helpdesk", ref=ref)

    def lookup(self, key, payload):
        try:
            answer = self.client.request("GET", f"/api/lookup/{quote(key)}")
        except (NotSent, NoAnswer) as exc:
            return LookupResult(None, detail=f"look-up failed: {exc}")
        if answer.status == 200:
            data = answer.json({})
            ref = str(data.get("id", "")) if isinstance(data, dict) else ""
            return LookupResult(True, external_ref=ref, detail=f"found by key ({ref})")
        if answer.status == 404:
            return LookupResult(False, detail="the helpdesk has no record of this key")
        return LookupResult(None, detail=f"look-up answered {answer.status}")

    def probe(self):
        try:
            answer = self.client.request("GET", "/api/lookup/0000-helpdesk-probe")
        except (NotSent, NoAnswer) as exc:
            return str(exc)
        return "" if answered_at_all(answer.status) else f"the helpdesk answered {answer.status} to a look-up"

    def identity(self) -> str:
        """Which helpdesk answers (`identity.IdentityUnknown` if it does not): the instance id it reports at
        `GET /api/helpdesk`; a service without that endpoint (404) is known by its URL."""
        try:
            answer = self.client.request("GET", "/api/helpdesk")
        except (NotSent, NoAnswer) as exc:
            raise IdentityUnknown(str(exc)) from None
        data = answer.json({})
        if answer.status == 200 and isinstance(data, dict) and str(data.get("instance") or "").strip():
            return f"rest|{str(data['instance']).strip()[:200]}"
        if answer.status == 404:
            return f"rest|url|{self.client.base_url}"
        raise IdentityUnknown(f"GET /api/helpdesk answered {answer.status}")

    def check(self):
        try:
            answer = self.client.request("GET", "/api/lookup/0000-helpdesk-check")
        except (NotSent, NoAnswer) as exc:
            return [str(exc)]
        if answer.status in (401, 403):
            return [f"the helpdesk refused the credentials (HTTP {answer.status}); check HELPDESK_TOKEN"]
        if answer.status not in (200, 404):
            return [f"GET /api/lookup/… answered {answer.status}: is HELPDESK_URL the helpdesk's REST API?"]
        return []
