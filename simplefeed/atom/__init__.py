"""Our documents, rendered (:mod:`.render`) and our own pages read back (:mod:`.read`).

The checks on what producers send are the door's (:mod:`simplefeed.door`).
"""

from simplefeed.atom.read import (
    FeedHead,
    PageUnreadable,
    feed_head,
    page_entries,
    prev_archive_sha256,
    self_href,
)
from simplefeed.atom.render import (
    DOCUMENT_FORMAT,
    GENERATOR,
    GENERATOR_URI,
    MAX_DOCUMENT_BYTES,
    EntryParts,
    WritableEntry,
    atom_content_type,
    entry_bytes,
    entry_bytes_bound,
    entry_links,
    entry_parts,
    json_text,
    max_entry_bytes,
    render,
    render_with_feedgen,
)

__all__ = [
    "DOCUMENT_FORMAT",
    "GENERATOR",
    "GENERATOR_URI",
    "MAX_DOCUMENT_BYTES",
    "EntryParts",
    "FeedHead",
    "PageUnreadable",
    "WritableEntry",
    "atom_content_type",
    "entry_bytes",
    "entry_bytes_bound",
    "entry_links",
    "entry_parts",
    "feed_head",
    "json_text",
    "max_entry_bytes",
    "page_entries",
    "prev_archive_sha256",
    "render",
    "render_with_feedgen",
    "self_href",
]
