"""Pages for people: ``GET /`` (the feeds) and ``GET /feeds/{feed}`` (one page of a feed).

A feed's page shows its entries newest first, with links to the older and newer pages. This is
the one module that imports Jinja2.

The pages are rendered on the server, with no JavaScript and no external assets. Everything a
producer sent is shown as text, because Jinja2 escapes it. JSON content is pretty-printed. HTML
and XML content show as their source, never rendered. Links appear only when they are http(s).
A Content-Security-Policy that allows nothing but the inline stylesheet backs that up. The Atom
documents are not touched, because these are other URLs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import falcon
import jinja2

from simplefeed.app import errors
from simplefeed.errors import FeedNotFound, NotFound
from simplefeed.model import Entry, rfc3339
from simplefeed.rules import paging
from simplefeed.service import Simplefeed
from simplefeed.settings import FEED_NAME_RE

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
#: Only the inline stylesheet: no script, no image, no frame, no form target.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
#: Content longer than this is cut in the page. The Atom documents have all of it.
MAX_SHOWN_CHARS = 64 * 1024


@dataclass(frozen=True)
class EntryView:
    seq: int
    id: str
    title: str
    updated: str
    kind: str  # What the content is, as shown: "JSON", "text", "HTML source", ...
    content: str | None
    summary: str | None
    author: str | None
    categories: tuple[str, ...]
    links: tuple[tuple[str, str, bool], ...]  # (rel, href, whether it may be a link)


def _content(entry: Entry) -> tuple[str, str | None]:
    event = entry.event
    text, media = event.content, (event.content_type or "text").lower()
    if text is None:
        return "none", None
    if media == "application/json" or media.endswith("+json"):
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            kind = "JSON"
        except ValueError:
            kind = media
    elif media == "text":
        kind = "text"
    elif media == "html":
        kind = "HTML source"
    elif media == "xhtml":
        kind = "XHTML source"
    else:
        kind = media
    if len(text) > MAX_SHOWN_CHARS:
        text = text[:MAX_SHOWN_CHARS] + f"\n… ({len(text) - MAX_SHOWN_CHARS} more characters)"
    return kind, text


def entry_view(entry: Entry) -> EntryView:
    event = entry.event
    kind, content = _content(entry)
    author = event.author
    return EntryView(
        seq=entry.seq,
        id=entry.id,
        title=event.title,
        updated=rfc3339(entry.updated_us),
        kind=kind,
        content=content,
        summary=event.summary,
        author=None if author is None else author.name,
        categories=tuple(c.label or c.term for c in event.categories),
        links=tuple(
            (link.rel, link.href, link.href.lower().startswith(("http://", "https://")))
            for link in event.links
        ),
    )


class _Html:
    def __init__(self, core: Simplefeed) -> None:
        self.core = core

    def send(self, resp: falcon.Response, template: str, **values: object) -> None:
        resp.content_type = falcon.MEDIA_HTML
        # Rendered per request, without a validator. There is nothing to revalidate a stored
        # copy with, so no copy is kept. REDbot warns of "no-cache" without a validator.
        resp.cache_control = ["no-store"]
        resp.set_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        resp.text = _TEMPLATES.get_template(template).render(**values)


class Index(_Html):
    """``GET /``: every feed, its head, pages and last publish time."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        feeds = [self.core.stats(f).describe() for f in self.core.feeds()]
        self.send(resp, "index.html", feeds=feeds)


class FeedPage(_Html):
    """``GET /feeds/{feed}[?page=N]``: page N of the feed for people.

    The default is the working page. Entries show newest first, with links to the older and
    newer pages.

    A feed or page that is not there, or a malformed ``page``, is a page for people too. That
    holds when the request prefers HTML to JSON, as a browser's does. It has the same status and
    message as the JSON error every other client gets. The reply then varies on that
    (``Vary: Accept``).
    """

    def on_get(self, req: falcon.Request, resp: falcon.Response, feed: str) -> None:
        try:
            self.show(req, resp, feed)
        except (NotFound, falcon.HTTPBadRequest) as exc:
            resp.vary = ["Accept"]
            if req.client_prefers((falcon.MEDIA_JSON, falcon.MEDIA_HTML)) != falcon.MEDIA_HTML:
                raise
            errors.reply(req, resp, exc)  # The status and message every client gets.
            status, message = resp.status, resp.media["message"]
            resp.media = None
            self.send(resp, "error.html", status=status, message=message)
            resp.status = status

    def show(self, req: falcon.Request, resp: falcon.Response, feed: str) -> None:
        if not FEED_NAME_RE.match(feed):
            raise FeedNotFound(feed)
        f = self.core.feed(feed)
        stats = self.core.stats(f).describe()
        working = paging.working_page(f.head_seq, f.page_size)
        number = req.get_param_as_int("page", min_value=1) or working
        if number > working:  # A page the feed does not have yet. Not a malformed request.
            raise NotFound(f"feed {f.name!r} has pages 1 to {working}")
        entries = [entry_view(e) for e in self.core.page_entries(f, number)]
        self.send(
            resp,
            "feed.html",
            feed=f,
            number=number,
            working=working,
            frozen=number < working,
            entries=entries,
            entry_points=stats["entry_points"],
            atom_url=self.core.urls(f.name).page(number),
            last_publish=stats["last_publish"],
            retired=stats["retired"],
        )
