"""Simplefeed: RFC 5005 archived Atom event feeds, publisher and consumer."""

__version__ = "0.1.0"
