"""The consumer's exceptions: one branch of :class:`simplefeed.errors.SimplefeedError`.

::

    SimplefeedError
    └── ClientError                     anything the consumer raises on purpose
        ├── NoSuchEntry                 .seq: Consumer.reset to a number the feed does not hold
        ├── FetchError                  .url: a document could not be retrieved
        │   ├── RetriesExhausted        .attempts: network errors, timeouts, 5xx until the limit
        │   ├── UnexpectedStatus        .status: an answer that retrying cannot fix (4xx, 3xx);
        │   │                           .server_message: what its JSON error body said, if any
        │   ├── RedirectRefused         .location: a redirect to an origin not allowed
        │   ├── ResponseTooLarge        .limit: a body over the size bound (compressed or not)
        │   └── Stopped                 the fetcher was interrupted (Consumer.stop): the
        │                               consumer ends its iteration on it, never raises it
        ├── FeedError                   .url: the feed broke the protocol; checkpoint untouched
        │   ├── NotAtom                 .reason: not well-formed XML, or not an Atom feed;
        │   │                           .content_type: the response's, when no XML type
        │   ├── MalformedPage           .reason: Atom, but not a Simplefeed document
        │   │   └── TooManyPages        .limit: over max_pages pages to walk back
        │   ├── LinkLoop                .chain: following links came back to a page seen
        │   ├── LinkRefused             .entry_point: a link to an origin not allowed
        │   ├── SequenceGap             .expected, .found: sequence numbers not contiguous
        │   ├── RepeatedEntry           .entry_id, .expected, .found: an id at another number
        │   ├── DigestMismatch          .expected, .found: a page is not the one its newer
        │   │                           neighbour's prev-archive link vouches for (sf:sha256)
        │   └── LastEntryVanished       .entry_id: the checkpoint's entry is in the feed no more
        ├── HandlerError                .entry: the handler raised (the cause is __cause__);
        │   │                           the checkpoint stands just before that entry
        │   └── TooManyParked           .limit: parking this entry would pass max_parked
        └── StateError                  .path: the checkpoint file cannot be used

Every error carries the attributes that identify what failed. A :class:`FeedError` never moves
the checkpoint. Fix the feed, or the checkpoint by hand, and run again.

Some errors a setting could avoid. Such an error names that setting's parameter
(:attr:`ClientError.setting`). The parameters are ``allow_redirect_origins``, ``max_parked``
and ``max_pages``. ``simplefeed consume`` names its flag instead (:meth:`ClientError.naming`).
Otherwise a user would read "(see allow_redirect_origins)" and look for an option of that name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simplefeed.errors import SimplefeedError
from simplefeed.lines import escape_field

if TYPE_CHECKING:
    from simplefeed.client.entry import FeedEntry

#: The most characters of a server's own words that an error message quotes. Such words are
#: its error message or its Content-Type.
QUOTED_CHARS = 200


def quoted(text: str) -> str:
    """Words a server sent, as an error message quotes them.

    They are cut at :data:`QUOTED_CHARS` characters, with control characters
    backslash-escaped. So they neither flood the one line of the message nor reach the terminal
    as controls.
    """
    cut = escape_field(text[:QUOTED_CHARS])
    return f"{cut}..." if len(text) > QUOTED_CHARS else cut


class ClientError(SimplefeedError):
    """Base of every error raised on purpose by :mod:`simplefeed.client`."""

    #: The parameter of :class:`~simplefeed.client.Consumer` the message names (``None`` for
    #: none). Its last mention in the message is the error's own words. Whatever a server chose
    #: comes before it, such as a URL or an entry id.
    setting: str | None = None

    def naming(self, names: Mapping[str, str]) -> str:
        """The message, with the parameter it names given as ``names`` calls it.

        The command line passes ``{"max_parked": "--max-parked"}``, for example. The message
        is returned as it is when it names none of them.
        """
        text = str(self)
        if self.setting is None or self.setting not in names:
            return text
        before, _, after = text.rpartition(self.setting)
        return f"{before}{names[self.setting]}{after}"


class NoSuchEntry(ClientError):
    """The feed holds no entry of the sequence number asked for (:meth:`Consumer.reset`)."""

    def __init__(self, url: str, seq: int, newest: int | None) -> None:
        held = "no entry" if newest is None else f"entries 1 to {newest}"
        super().__init__(f"{url}: the feed holds no entry numbered {seq} (it holds {held})")
        self.url = url
        self.seq = seq
        self.newest = newest


class FetchError(ClientError):
    def __init__(self, url: str, message: str) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url


class RetriesExhausted(FetchError):
    """Transient failures (network, timeout, 5xx, 429) went on past the retry limit."""

    def __init__(self, url: str, attempts: int, last: str) -> None:
        super().__init__(url, f"gave up after {attempts} attempts; last error: {last}")
        self.attempts = attempts
        self.last = last


class Stopped(FetchError):
    """A request given up because the fetcher was interrupted (:meth:`Consumer.stop`).

    The consumer ends its iteration on it.
    """

    def __init__(self, url: str) -> None:
        super().__init__(url, "stopped")


class UnexpectedStatus(FetchError):
    """An HTTP status that retrying will not fix (a 404, a 403, a redirect loop...).

    ``server_message`` is the ``message`` of the JSON object the body held. That is a
    Simplefeed server's error shape, ``{"error": ..., "message": ...}``. The error's message
    quotes it, because the status alone does not tell a mistyped feed name from a page gone.
    """

    def __init__(
        self, url: str, status: int, server_message: str | None = None, *, why: str = ""
    ) -> None:
        says = "" if server_message is None else f"; the server says: {quoted(server_message)}"
        why = f" ({why})" if why else ""
        super().__init__(url, f"unexpected HTTP status {status}{why}{says}")
        self.status = status
        self.server_message = server_message


class RedirectRefused(FetchError):
    """A redirect to an origin other than the entry point's, and not allowed."""

    setting = "allow_redirect_origins"

    def __init__(self, url: str, location: str) -> None:
        super().__init__(
            url, f"redirect to another origin refused: {location} (see allow_redirect_origins)"
        )
        self.location = location


class FeedError(ClientError):
    """The feed broke the protocol. Processing stops and the checkpoint is left as it was."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url


class NotAtom(FeedError):
    """The body is not well-formed XML, or its root is not an Atom 1.0 ``feed``.

    ``content_type`` is the response's Content-Type when it names no XML type. An HTML page or
    a JSON reply are examples. The message says it first. The parser's complaint about such a
    body ("syntax error" at line 2) does not tell that the URL is not a feed's.
    """

    def __init__(self, url: str, reason: str, content_type: str | None = None) -> None:
        of_type = "" if content_type is None else f" (Content-Type {quoted(content_type)})"
        super().__init__(url, f"not an Atom feed{of_type}: {reason}")
        self.reason = reason
        self.content_type = content_type


class MalformedPage(FeedError):
    """Atom, but not what the protocol promises.

    Examples are an entry without an id or sequence number, entries out of order, and an
    archived page without ``next-archive``.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(url, reason)
        self.reason = reason


class TooManyPages(MalformedPage):
    """Walking back from the entry point went over ``limit`` pages (``max_pages``).

    It had not reached the last processed entry, or the feed's start. No more pages are
    fetched.
    """

    setting = "max_pages"

    def __init__(self, url: str, limit: int) -> None:
        super().__init__(
            url,
            f"not fetched: over {limit} pages to walk back (max_pages; a longer history needs a"
            " larger bound)",
        )
        self.limit = limit


class LinkLoop(FeedError):
    """Following ``prev-archive`` or ``next-archive`` led back to a page already visited."""

    def __init__(self, url: str, chain: Sequence[str]) -> None:
        super().__init__(url, f"link loop: {' -> '.join([*chain, url])}")
        self.chain = tuple(chain)


class LinkRefused(FeedError):
    """A page links to an origin that is not allowed, so the link is not fetched.

    The links are ``prev-archive`` and ``next-archive``. The allowed origins are the entry
    point's and those in ``allow_redirect_origins``.
    """

    setting = "allow_redirect_origins"

    def __init__(self, url: str, entry_point: str) -> None:
        super().__init__(
            url,
            f"not fetched: a link to another origin than the entry point's ({entry_point};"
            " see allow_redirect_origins)",
        )
        self.entry_point = entry_point


class SequenceGap(FeedError):
    """The next entry's sequence number is not the previous one plus one.

    Entries are missing, repeated, or out of order.
    """

    def __init__(self, url: str, entry_id: str, expected: int, found: int) -> None:
        super().__init__(
            url,
            f"sequence gap at entry '{quoted(entry_id)}': expected sequence {expected},"
            f" found {found}",
        )
        self.entry_id = entry_id
        self.expected = expected
        self.found = found


class RepeatedEntry(FeedError):
    """An entry id appears at another sequence number than the one it was processed at.

    The same holds for the number it was listed at. Position is found by id and sequence
    number, never by id alone.
    """

    def __init__(self, url: str, entry_id: str, expected: int, found: int) -> None:
        super().__init__(
            url,
            f"entry '{quoted(entry_id)}' appears again with sequence number {found} "
            f"(it has sequence number {expected})",
        )
        self.entry_id = entry_id
        self.expected = expected
        self.found = found


class DigestMismatch(FeedError):
    """A page's SHA-256 is not the digest the newer document's ``prev-archive`` link gives.

    The page was altered, or is not the one linked. Nothing on it is processed.
    """

    def __init__(self, url: str, expected: str, found: str) -> None:
        super().__init__(
            url, f"SHA-256 mismatch: the newer page's prev-archive says {expected}, got {found}"
        )
        self.expected = expected
        self.found = found


class ResponseTooLarge(FetchError):
    """A response body went over the size bound (as received, or once decompressed)."""

    def __init__(self, url: str, what: str, limit: int) -> None:
        super().__init__(url, f"response too large: {what} over the limit of {limit} bytes")
        self.limit = limit


@dataclass(frozen=True)
class Parting:
    """Where a feed parts from the entries a consumer read.

    ``agreed`` is the sequence number of the last of them the feed holds at its number. The
    feed holds each entry before it as read too. None means not even the oldest read is held.
    ``lost`` lists those read after it, by sequence number and id, oldest first.
    """

    agreed: int | None
    lost: tuple[tuple[int, str], ...]


class LastEntryVanished(FeedError):
    """The last processed entry is gone from the feed.

    Walking back from the entry point, it is not on the page its sequence number places it on.
    Nor is it on the page its checkpoint names. Or the feed's newest entry is another than the
    one read at its number. This happens when a server's database is restored from a backup
    that lost entries, and published to since.

    The consumer may remember the entries it read: the state file's last
    :data:`~simplefeed.client.state.PROCESSED_KEPT`. Then ``parting`` says where the feed
    parts from them (:class:`Parting`). It gives the last entry read that the feed still holds
    at its number. It also gives those read after it, which the feed does not hold.
    """

    def __init__(self, url: str, entry_id: str, parting: Parting | None = None) -> None:
        said = f"the last processed entry '{quoted(entry_id)}' is no longer in the feed"
        if parting is None:
            said += " (walked back to where its sequence number would be)"
        elif parting.agreed is None:
            said += (
                "; the feed parts from what was processed here before sequence"
                f" {parting.lost[0][0]}, the oldest of the {len(parting.lost)} entries"
                " remembered (where, is not known)"
            )
        else:
            shown = ", ".join(f"{seq} '{quoted(entry)}'" for seq, entry in parting.lost[:3])
            more = len(parting.lost) - 3
            said += (
                f"; the feed holds the entries processed here up to sequence {parting.agreed},"
                f" not the {len(parting.lost)} processed after it ({shown}"
                f"{f' and {more} more' if more > 0 else ''})"
            )
        super().__init__(url, said)
        self.entry_id = entry_id
        self.parting = parting


class HandlerError(ClientError):
    """The handler raised on ``entry``; the checkpoint is the entry before it."""

    def __init__(self, entry: FeedEntry, cause: BaseException) -> None:
        super().__init__(
            f"handler failed on entry '{quoted(entry.id)}' (sequence {entry.seq}): {cause}"
        )
        self.entry = entry


class TooManyParked(HandlerError):
    """The handler failed on ``entry`` with ``limit`` entries parked already.

    The consumer stops rather than park the whole feed. The checkpoint stays just before that
    entry.
    """

    setting = "max_parked"

    def __init__(self, entry: FeedEntry, cause: BaseException, limit: int) -> None:
        super().__init__(entry, cause)
        parked = "1 entry is" if limit == 1 else f"{limit} entries are"
        self.args = (f"{self.args[0]}; {parked} parked already (max_parked)",)
        self.limit = limit


class StateError(ClientError):
    """The checkpoint file cannot be opened, read or written."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
