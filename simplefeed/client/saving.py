"""Store a consumer's page checkpoints on a thread of their own while the walk reads on."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from simplefeed.client.state import Checkpoint, StateFile


class BackgroundSaver:
    """Store checkpoints durably on one thread, through that thread's own state connection.

    A consumer that checkpoints per page starts storing a page's checkpoint while the walk reads
    the next pages. It waits for that write before it hands over the next page's first entry.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool: ThreadPoolExecutor | None = None
        self._writing: Future[None] | None = None
        self._thread = threading.local()

    @property
    def busy(self) -> bool:
        """Whether a write started and was not waited for."""
        return self._writing is not None

    def start(
        self, url: str, checkpoint: Checkpoint, now: float, processed: list[tuple[int, str]]
    ) -> None:
        """Wait for the write before, then start storing ``checkpoint``."""
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="simplefeed-checkpoint")
        self._writing = self._pool.submit(self._save, url, checkpoint, now, processed)

    def wait(self) -> None:
        """Wait until the last write is durable. Raise its StateError if it failed."""
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.result()

    def close(self) -> None:
        """Close the thread's connection and end the thread."""
        if self._pool is not None:
            self._pool.submit(self._close_state)
            self._pool.shutdown(wait=True)

    def _save(
        self, url: str, checkpoint: Checkpoint, now: float, processed: list[tuple[int, str]]
    ) -> None:
        state: StateFile | None = getattr(self._thread, "file", None)
        if state is None:
            state = self._thread.file = StateFile(self.path)
        state.save_checkpoint(url, checkpoint, now, processed)

    def _close_state(self) -> None:
        state: StateFile | None = getattr(self._thread, "file", None)
        if state is not None:
            state.close()
            self._thread.file = None
