"""The service: the facade and the jobs it delegates to.

:class:`Simplefeed` is what the HTTP app and the command line hold. Each job lives in a module
of its own with the state it keeps: feeds, tokens, publishing, reading, pages, health and
maintenance.
"""

from simplefeed.service.clock import Clock, random_uuid, system_clock
from simplefeed.service.facade import Simplefeed
from simplefeed.service.feeds import FeedStats
from simplefeed.service.health import HealthReport
from simplefeed.service.maintenance import Rebased, Recovered
from simplefeed.service.reading import Live

__all__ = [
    "Clock",
    "FeedStats",
    "HealthReport",
    "Live",
    "Rebased",
    "Recovered",
    "Simplefeed",
    "random_uuid",
    "system_clock",
]
