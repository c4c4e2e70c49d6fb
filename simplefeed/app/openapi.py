"""The OpenAPI 3.1 description of the HTTP API, served at ``/openapi.json``.

The event schema is generated from the same pydantic models that validate requests. So the
document cannot drift from the validator. ``docs/openapi.json`` is the committed copy, and a
test checks that it is current. Regenerate it with
``python -m simplefeed.app.openapi > docs/openapi.json``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from simplefeed import __version__
from simplefeed.door.events import event_json_schemas

REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref("Error")}}}


_HTML = {
    "description": "An HTML page",
    "content": {"text/html": {"schema": {"type": "string"}}},
}
_ATOM = {
    "application/atom+xml; charset=utf-8": {"schema": {"type": "string"}},
}


def _document_get(summary: str, *, page: bool, feed: bool) -> dict[str, Any]:
    params: list[dict[str, Any]] = []
    if feed:
        params.append(
            {"name": "feed", "in": "path", "required": True, "schema": {"type": "string"}}
        )
    if page:
        params.append(
            {
                "name": "n",
                "in": "path",
                "required": True,
                "schema": {"type": "integer", "minimum": 1},
            }
        )
    validators = {
        "ETag": {
            "description": "One per content coding: the identity ETag's opaque part with "
            '"-gzip" or "-br" appended for those codings',
            "schema": {"type": "string"},
        },
        "Cache-Control": {"schema": {"type": "string"}},
        "Content-Encoding": {
            "description": "br or gzip, as Accept-Encoding asks (absent: identity)",
            "schema": {"type": "string", "enum": ["br", "gzip"]},
        },
        "Vary": {"schema": {"type": "string", "enum": ["Accept-Encoding"]}},
    }
    return {
        "summary": summary,
        "parameters": params,
        "responses": {
            "200": {"description": "The Atom document", "headers": validators, "content": _ATOM},
            "304": {"description": "Not modified (If-None-Match / If-Modified-Since)"},
            "404": _error("No such feed or page"),
            "406": _error("Accept-Encoding refuses identity and every coding offered"),
        },
    }


def _publish(feed: bool) -> dict[str, Any]:
    params = (
        [{"name": "feed", "in": "path", "required": True, "schema": {"type": "string"}}]
        if feed
        else []
    )
    body_schema = {"oneOf": [_ref("Event"), {"type": "array", "items": _ref("Event")}]}
    reply = {"oneOf": [_ref("Published"), _ref("PublishedBatch")]}
    return {
        "summary": "Publish one event (an object) or a batch (an array, all or nothing)",
        "security": [{"bearer": []}],
        "parameters": params,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": body_schema}},
        },
        "responses": {
            "201": {
                "description": "At least one new entry",
                "headers": {
                    "Location": {
                        "description": "The page of the entry (a single event only)",
                        "schema": {"type": "string", "format": "uri"},
                    }
                },
                "content": {"application/json": {"schema": reply}},
            },
            "200": {
                "description": "Every event was a replay of an entry already held",
                "content": {"application/json": {"schema": reply}},
            },
            "400": _error("Malformed JSON or not UTF-8, or a query string"),
            "401": _error("Missing or invalid token"),
            "403": _error("Token limited to another feed"),
            "404": _error("No such feed"),
            "409": _error("An id the feed holds with different content"),
            "410": _error("The feed is retired: it is read as ever, takes no more events"),
            "411": _error("No Content-Length (chunked bodies are refused)"),
            "413": _error("Body or batch too large"),
            "415": _error("Not application/json, or a body in a content coding (send identity)"),
            "422": _error("An event breaks the schema or a limit"),
            "503": {
                **_error(
                    "Nothing stored; retry after Retry-After: the server is busy with other"
                    " publishes, the database does not answer or cannot be written, the disk"
                    " is short of space, or the base URL differs from the archived pages'"
                ),
                "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
            },
        },
    }


def _locate(feed: bool) -> dict[str, Any]:
    params: list[dict[str, Any]] = []
    if feed:
        params.append(
            {"name": "feed", "in": "path", "required": True, "schema": {"type": "string"}}
        )
    params.append(
        {
            "name": "id",
            "in": "path",
            "required": True,
            "description": "The entry's id, percent-encoded (every character but A-Z a-z 0-9 "
            "- . _ ~ as %XX of its UTF-8 bytes)",
            "schema": {"type": "string"},
        }
    )
    return {
        "summary": "Entry locator: where an entry is",
        "parameters": params,
        "responses": {
            "303": {
                "description": "See the page that holds the entry (its permanent URL). "
                "Cache-Control: a year once the page is frozen, the live documents' max-age "
                "while it is the working page",
                "headers": {
                    "Location": {"schema": {"type": "string", "format": "uri"}},
                    "Simplefeed-Seq": {
                        "description": "The entry's sequence number",
                        "schema": {"type": "integer", "minimum": 1},
                    },
                    "Cache-Control": {"schema": {"type": "string"}},
                },
            },
            "404": _error("No such feed, or no entry with this id in it"),
        },
    }


def build() -> dict[str, Any]:
    """The OpenAPI document of the HTTP API."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Simplefeed",
            "version": __version__,
            "description": "RFC 5005 archived Atom event feeds. Reading is public; publishing "
            "needs a bearer token (`simplefeed token create`).",
        },
        "paths": {**_feed_paths(), **_other_paths()},
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A producer token, made by simplefeed token create",
                }
            },
        },
    }


def _schemas() -> dict[str, Any]:
    published = {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "seq", "page", "url", "created"],
        "properties": {
            "id": {"type": "string"},
            "seq": {"type": "integer", "minimum": 1},
            "page": {"type": "integer", "minimum": 1},
            "url": {"type": "string"},
            "created": {"type": "boolean"},
        },
    }
    schemas = event_json_schemas(REF)
    schemas["Published"] = published
    schemas["PublishedBatch"] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["entries"],
        "properties": {"entries": {"type": "array", "items": _ref("Published")}},
    }
    schemas["Error"] = {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"type": "string"},
            "message": {"type": "string"},
            "index": {"type": "integer"},
            "field": {"type": "string"},
            "id": {"type": "string"},
            "feed": {"type": "string"},
        },
    }
    return schemas


def _feed_paths() -> dict[str, Any]:
    """The documents, publishing and the entry locator, of the default feed and of any feed."""
    return {
        "/recent": {"get": _document_get("Recent document", page=False, feed=False)},
        "/pages/{n}": {"get": _document_get("Page n", page=True, feed=False)},
        "/entries": {"post": _publish(feed=False)},
        "/entries/{id}": {"get": _locate(feed=False)},
        "/feeds/{feed}/recent": {
            "get": _document_get("Recent document of a feed", page=False, feed=True)
        },
        "/feeds/{feed}/pages/{n}": {"get": _document_get("Page n of a feed", page=True, feed=True)},
        "/feeds/{feed}/entries": {"post": _publish(feed=True)},
        "/feeds/{feed}/entries/{id}": {"get": _locate(feed=True)},
    }


def _other_paths() -> dict[str, Any]:
    """The pages for people, the metrics and the health check."""
    return {
        "/": {
            "get": {
                "summary": "HTML for people: every feed, its head, pages and entry points",
                "responses": {"200": _HTML},
            }
        },
        "/feeds/{feed}": {
            "get": {
                "summary": "HTML for people: a page of a feed's entries, newest first",
                "parameters": [
                    {"name": "feed", "in": "path", "required": True, "schema": {"type": "string"}},
                    {
                        "name": "page",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1},
                        "description": "Page number (default: the working page)",
                    },
                ],
                "responses": {
                    "200": _HTML,
                    "400": _error("No such page"),
                    "404": _error("No such feed"),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics (absent with SIMPLEFEED_METRICS=off)",
                "responses": {
                    "200": {
                        "description": "The Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Liveness and database reachability",
                "responses": {
                    "200": {
                        "description": "Up",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "503": _error("Database unavailable"),
                },
            }
        },
    }


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


@functools.cache
def served() -> bytes:
    """The document as ``GET /openapi.json`` sends it.

    It is rendered on the first request of a process, because it depends on the code alone.
    Rendering it at each app's start would cost 10-20 ms of a worker's load, and of every
    test's app.
    """
    return render().encode()


if __name__ == "__main__":
    print(render(), end="")
