"""Producer tokens: minting, rotating and revoking them, and checking a publish's credentials."""

from __future__ import annotations

import threading
import time

from cachetools import TTLCache

from simplefeed.errors import InvalidLabel
from simplefeed.rules import auth
from simplefeed.service.clock import Clock
from simplefeed.store import Store

__all__ = ["SCREEN_S", "SCREEN_SIZE", "Tokens"]

#: How long a process skips the screen's lookup for credentials it found valid.
SCREEN_S = 5.0
#: How many such credentials it remembers (each a token id, a hash and a feed name).
SCREEN_SIZE = 1024


class Tokens:
    """Mints and checks producer tokens. The database keeps only their hashes."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._screened: TTLCache[tuple[int, str, str], bool] = TTLCache(
            SCREEN_SIZE, SCREEN_S, timer=time.monotonic
        )
        self._screened_lock = threading.Lock()  # cachetools' caches are not thread-safe

    def create(self, *, feed: str | None = None, label: str | None = None) -> str:
        """Mint a token, perhaps for one feed only, and return it.

        ``token list`` shows the label on one line, so it is checked as such.
        """
        if label is not None:
            problem = auth.label_problem(label)
            if problem is not None:
                raise InvalidLabel(f"token label {label!r:.80} {problem}")
        secret = auth.new_secret()
        token_id = self.store.create_token(
            secret_hash=auth.hash_secret(secret), feed=feed, label=label, now_us=self.clock()
        )
        return auth.format_token(token_id, secret)

    def revoke(self, token_id: int) -> bool:
        """Revoke a token; whether there was a live one with that id."""
        return self.store.revoke_token(token_id, self.clock())

    def rotate(self, token_id: int) -> str | None:
        """A new secret for a live token, or None if there is none with that id.

        The token keeps its id, feed and label. The old secret stops working at once.
        """
        secret = auth.new_secret()
        if not self.store.rotate_token(token_id, auth.hash_secret(secret)):
            return None
        return auth.format_token(token_id, secret)

    def check(self, credentials: auth.Credentials, feed: str) -> None:
        """Raise :class:`~simplefeed.errors.AuthError` unless the credentials may publish here."""
        record = self.store.token(credentials.token_id)
        auth.check(credentials, record, feed)

    def screen(self, credentials: auth.Credentials, feed: str) -> None:
        """Refuse a publish's credentials before its body is read.

        A client without a valid token then costs a lookup, never the parsing of its body.
        Credentials found valid in the last :data:`SCREEN_S` seconds are not looked up again.
        The publish checks them against the database all the same, so a revoked token is still
        refused at once.
        """
        key = (credentials.token_id, auth.hash_secret(credentials.secret), feed)
        with self._screened_lock:
            if key in self._screened:
                return
        self.check(credentials, feed)
        with self._screened_lock:
            self._screened[key] = True
