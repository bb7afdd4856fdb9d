"""Talking to the Zendesk Support API: the client from settings, one Retry-After wait, all pages, errors in words.

Shared by the Zendesk channel (`ticketagent.channels.zendesk`) and by anything
else that reads Zendesk, such as the product's ticket source. Every request
goes through `ledger.channels.http.HttpClient`, so a caller still tells
"never sent" (`NotSent`) from "sent, no answer" (`NoAnswer`) from "answered".

Facts of the API relied on here (Zendesk developer documentation):

* Authentication with an API token is HTTP basic auth as
  `{email}/token:{api_token}` (https://developer.zendesk.com/api-reference/introduction/security-and-auth/).
* Over the rate limit the API answers `429 Too Many Requests` with a
  `Retry-After` header: the seconds to wait before retrying
  (https://developer.zendesk.com/api-reference/introduction/rate-limits/).
  A 429 means the request was not processed.
* Lists paginate by cursor when `page[size]` is given (at most 100): the
  answer carries `meta.has_more`, `meta.after_cursor` and `links.next`;
  without it, by offset, with `next_page` (null on the last page)
  (https://developer.zendesk.com/api-reference/introduction/pagination/).
* Errors are a status with a JSON body `{"error", "description",
  "details": {field: [{"description"}]}}`; a 401 says "Couldn't
  authenticate you" (https://developer.zendesk.com/api-reference/introduction/requests/).
"""

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from ledger.channels.base import CallDeadline
from ledger.channels.http import Answer, HttpClient, NoAnswer, NotSent

API = "/api/v2"
# "Returns a maximum of 100 records per page" (List Audits for a Ticket); the
# same cap holds for cursor pagination everywhere.
MAX_PAGE_SIZE = 100
# A list longer than this many pages is not read to its end (a look-up says
# it cannot tell rather than read 100 000 audits).
MAX_PAGES = 1000
# Audit pages carry every comment's text: allow large answers.
MAX_ANSWER_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ZendeskConfig:
    """Where the Zendesk account is and how to reach it."""

    url: str  # https://<subdomain>.zendesk.com
    user: str  # the agent's email address (API-token authentication)
    token: str  # the API token
    connect_timeout: float
    read_timeout: float
    max_wait: float  # the longest Retry-After a request waits out before its one retry

    @classmethod
    def from_settings(cls, **overrides) -> "ZendeskConfig":
        values = dict(
            url=settings.HELPDESK_URL, user=getattr(settings, "HELPDESK_USER", ""),
            token=getattr(settings, "HELPDESK_TOKEN", ""),
            connect_timeout=float(settings.HELPDESK_CONNECT_TIMEOUT),
            read_timeout=float(settings.HELPDESK_READ_TIMEOUT),
            max_wait=float(getattr(settings, "ZENDESK_RATE_LIMIT_MAX_WAIT", 5.0)),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def make_client(config: ZendeskConfig) -> HttpClient:
    """An HTTP client with Zendesk's API-token authentication: basic auth as `{email}/token:{token}`."""
    return HttpClient(
        config.url, system="Zendesk", connect_timeout=config.connect_timeout, read_timeout=config.read_timeout,
        user=f"{config.user}/token", password=config.token, max_body=MAX_ANSWER_BYTES,
    )


def retry_after(answer: Answer) -> float | None:
    """The seconds a 429's `Retry-After` asks for, or None when absent or not a number."""
    raw = answer.header("retry-after").strip()
    try:
        seconds = float(raw)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def send(client: HttpClient, method: str, path: str, body=None, *, max_wait: float,
         sleep: Callable[[float], None] = time.sleep, deadline: CallDeadline | None = None) -> Answer:
    """One request; a 429 asking for at most `max_wait` seconds is waited out and the request sent once more.

    A 429 means Zendesk did not process the request, so sending it again
    cannot apply it twice. Raises `NotSent` / `NoAnswer` like `HttpClient.request` (a write needs the
    caller's `deadline`).
    """
    answer = client.request(method, path, body, deadline=deadline)
    if answer.status != 429:
        return answer
    wait = retry_after(answer)
    if wait is None or wait > max_wait:
        return answer
    sleep(wait)
    return client.request(method, path, body, deadline=deadline)


def error_text(answer: Answer) -> str:
    """What Zendesk said was wrong: `error`, `description` and each field of `details`."""
    data = answer.json(None)
    parts: list[str] = []
    if isinstance(data, dict):
        for name in ("error", "description"):
            value = data.get(name)
            if isinstance(value, str) and value:
                parts.append(value)
            elif isinstance(value, dict):  # some endpoints nest {"title", "message"}
                parts += [str(v) for v in value.values() if isinstance(v, str)]
        details = data.get("details")
        if isinstance(details, dict):
            for field, items in details.items():
                for item in items if isinstance(items, list) else [items]:
                    text = item.get("description") if isinstance(item, dict) else item
                    parts.append(f"{field}: {text}")
    if parts:
        return "; ".join(parts)[:400]
    return " ".join(answer.text.split())[:200] or "(an empty answer)"


def refusal(answer: Answer, *, what: str, thing: str, max_wait: float) -> str:
    """A 4xx answer in words: `what` was refused (e.g. "the update of ticket 7"); a 404 says `thing` does not exist."""
    status = answer.status
    if status == 401:
        return (f"Zendesk refused the credentials (HTTP 401) for {what}: check HELPDESK_USER (the agent's email "
                f"address) and HELPDESK_TOKEN (an API token): {error_text(answer)}")
    if status == 403:
        return (f"Zendesk forbade {what} (HTTP 403): the credentials are wrong or the agent HELPDESK_USER lacks "
                f"the permission: {error_text(answer)}")
    if status == 404:
        return f"Zendesk has no {thing} (HTTP 404): {error_text(answer)}"
    if status == 429:
        asked = answer.header("retry-after") or "no Retry-After"
        return (f"Zendesk rate-limited {what} (HTTP 429, Retry-After: {asked}); a request waits at most "
                f"{max_wait:g} s (ZENDESK_RATE_LIMIT_MAX_WAIT) and is retried once, so it was not processed: "
                f"try again later")
    return f"Zendesk refused {what} (HTTP {status}): {error_text(answer)}"


class PageError(Exception):
    """A list that could not be read to its end; the message says why. `status` is the HTTP status, if one came."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


def path_on(base_url: str, url: str) -> str | None:
    """`url` (a next-page link) as a path under `base_url`, or None when it points elsewhere.

    Credentials are only ever sent to the configured account: a link to
    another scheme, host or port is not followed.
    """
    base, link = urlsplit(base_url), urlsplit(url)
    if link.scheme or link.netloc:
        if (link.scheme, link.hostname, link.port) != (base.scheme, base.hostname, base.port):
            return None
    prefix = base.path.rstrip("/")
    path = link.path
    if prefix:
        if not path.startswith(prefix + "/"):
            return None
        path = path[len(prefix):]
    if not path.startswith("/"):
        return None
    return path + (f"?{link.query}" if link.query else "")


def next_link(page: dict) -> str | None:
    """The next page's URL from a cursor page (`meta.has_more`, `links.next`) or an offset page (`next_page`)."""
    meta = page.get("meta")
    if isinstance(meta, dict) and "has_more" in meta:
        if not meta.get("has_more"):
            return None
        links = page.get("links")
        link = links.get("next") if isinstance(links, dict) else None
        if not isinstance(link, str) or not link:
            raise PageError("Zendesk said there are more pages but gave no link to the next one")
        return link
    link = page.get("next_page")
    if link is not None and not isinstance(link, str):
        raise PageError(f"Zendesk's next_page is not a link: {link!r}")
    return link or None


def iter_pages(client: HttpClient, path: str, *, what: str, thing: str, max_wait: float,
               max_pages: int = MAX_PAGES, sleep: Callable[[float], None] = time.sleep) -> Iterator[dict]:
    """Every page of a list, first to last; `PageError` as soon as one cannot be read.

    The caller may stop early; only a loop that ends without an error has
    read the whole list.
    """
    seen: set[str] = set()
    for number in range(1, max_pages + 1):
        seen.add(path)
        try:
            answer = send(client, "GET", path, max_wait=max_wait, sleep=sleep)
        except (NotSent, NoAnswer) as exc:
            raise PageError(f"page {number} of {what}: {exc}") from exc
        if answer.status != 200:
            if 400 <= answer.status < 500:
                text = refusal(answer, what=what, thing=thing, max_wait=max_wait)
            else:
                text = f"Zendesk answered HTTP {answer.status} to page {number} of {what}: {error_text(answer)}"
            raise PageError(text, status=answer.status)
        page = answer.json(None)
        if not isinstance(page, dict):
            raise PageError(f"page {number} of {what} is not a JSON object (cut short?)", status=200)
        yield page
        link = next_link(page)
        if link is None:
            return
        path = path_on(client.base_url, link)
        if path is None:
            raise PageError(f"the next page of {what} is not on {client.base_url}: {link}")
        if path in seen:
            raise PageError(f"the next page of {what} repeats an earlier one: {link}")
    raise PageError(f"{what} has more than {max_pages} pages; not read to the end")
