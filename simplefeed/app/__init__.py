"""The HTTP application (falcon): ``create_app(settings)`` wires resources to a core."""

from __future__ import annotations

from collections.abc import Callable

import falcon

from simplefeed.app import errors, resources
from simplefeed.core import Clock, Simplefeed, random_uuid, system_clock
from simplefeed.settings import Settings

__all__ = ["create_app"]


def create_app(
    settings: Settings,
    *,
    core: Simplefeed | None = None,
    clock: Clock = system_clock,
    new_uuid: Callable[[], str] = random_uuid,
) -> falcon.App[falcon.Request, falcon.Response]:
    core = core if core is not None else Simplefeed(settings, clock=clock, new_uuid=new_uuid)
    app = falcon.App(cors_enable=False)
    app.req_options.strip_url_path_trailing_slash = False
    errors.install(app)

    recent = resources.Recent(core)
    page = resources.Page(core)
    entries = resources.Entries(core)
    app.add_route("/recent", recent)
    app.add_route("/pages/{n:int(min=1)}", page)
    app.add_route("/entries", entries)
    app.add_route("/feeds/{feed}/recent", recent)
    app.add_route("/feeds/{feed}/pages/{n:int(min=1)}", page)
    app.add_route("/feeds/{feed}/entries", entries)
    app.add_route("/healthz", resources.Health(core))
    app.add_route("/openapi.json", resources.OpenApi())
    return app
