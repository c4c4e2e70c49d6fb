"""A server clock that ran fast and was set back is said.

Take a host that runs 30 days ahead, until NTP sets it back. Entries are dated strictly after
their feed's last change. So every entry published until the clock catches up is dated from
the fast time on, in pages archived for good. ``/healthz`` and the logs say so, from each
health check, once a minute. It is a warning, because failing every node's health for 30 days
would take the service down. ``simplefeed_head_age_seconds`` goes below zero instead of
reading 0. No page is sent with a Last-Modified later than the response's own time (RFC 9110
8.8.2.1). The tests run the app in process over the real store, SQLite and PostgreSQL, with a
fake clock set back.
"""

from __future__ import annotations

import falcon.testing
import pytest

from simplefeed.service import Simplefeed
from tests.conftest import FakeClock

DAY_US = 86_400_000_000


def publish(client: falcon.testing.TestClient, *titles: str) -> None:
    answer = client.simulate_post("/entries", json=[{"title": title} for title in titles])
    assert answer.status_code == 201, answer.text


def head_age(client: falcon.testing.TestClient) -> float:
    for line in client.simulate_get("/metrics").text.splitlines():
        if line.startswith('simplefeed_head_age_seconds{feed="events"}'):
            return float(line.split()[-1])
    raise AssertionError("no head age for events")


def test_a_clock_set_back_behind_the_feed_is_said_and_no_page_claims_a_later_time(
    core: Simplefeed,
    client: falcon.testing.TestClient,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock.advance(30 * 86_400)  # The host runs 30 days fast ...
    publish(client, "fast 1", "fast 2", "fast 3", "fast 4", "fast 5", "fast 6")  # Archives page 1.
    fast = client.simulate_get("/pages/1")
    assert fast.status_code == 200 and "Last-Modified" in fast.headers
    assert client.simulate_get("/healthz").json == {"status": "ok", "database": core.store.backend}
    clock.now -= 30 * DAY_US  # ... and is set back.
    healthz = client.simulate_get("/healthz")
    assert healthz.status_code == 200
    (warning,) = healthz.json["warnings"]
    assert "this server's clock" in warning and "2592000 s behind feed 'events'" in warning
    assert head_age(client) == pytest.approx(-30 * 86_400, abs=1)
    page = client.simulate_get("/pages/1")
    assert page.status_code == 200
    assert "Last-Modified" not in page.headers  # It would be 30 days after the Date.
    again = client.simulate_get(
        "/pages/1",
        headers={"If-None-Match": page.headers["ETag"], "If-Modified-Since": page.headers["Date"]},
    )
    assert again.status_code == 304
    # Logged at the first health check above, not again within the minute, and then again.
    publish(client, "after 1")
    client.simulate_get("/healthz")
    clock.advance(61)
    client.simulate_get("/healthz")
    said = [r.getMessage() for r in caplog.records if "behind feed 'events'" in r.getMessage()]
    assert len(said) == 2, said


def test_a_clock_a_little_behind_another_node_s_is_not_a_warning(
    core: Simplefeed, client: falcon.testing.TestClient, clock: FakeClock
) -> None:
    """A clock a little behind another node's is not a warning.

    Nodes' clocks differ a little. Within CLOCK_BEHIND_LIMIT_US, nothing is said.
    """
    publish(client, "one")
    clock.now -= 4_000_000
    assert "warnings" not in client.simulate_get("/healthz").json
    assert head_age(client) == pytest.approx(-4, abs=0.01)
