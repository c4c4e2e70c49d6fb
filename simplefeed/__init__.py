"""Simplefeed: RFC 5005 archived Atom event feeds, publisher and consumer."""

__version__ = "0.2.0"
