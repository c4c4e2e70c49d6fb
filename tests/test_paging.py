"""Pure paging rules, without I/O."""

from simplefeed.rules.paging import Urls, links, newly_full_pages, page_of, seq_range, working_page


def test_page_of_and_ranges_agree() -> None:
    for size in (1, 3, 100):
        for seq in range(1, 400):
            first, last = seq_range(page_of(seq, size), size)
            assert first <= seq <= last
            assert last - first + 1 == size


def test_working_page_is_the_first_page_not_full() -> None:
    assert working_page(0, 100) == 1
    assert working_page(99, 100) == 1
    assert working_page(100, 100) == 2  # Full page 1 is archived. Page 2 is empty.
    assert working_page(250, 100) == 3


def test_newly_full_pages() -> None:
    assert list(newly_full_pages(0, 99, 100)) == []
    assert list(newly_full_pages(99, 100, 100)) == [1]
    assert list(newly_full_pages(50, 350, 100)) == [1, 2, 3]
    assert list(newly_full_pages(100, 101, 100)) == []


def test_links_follow_design() -> None:
    urls = Urls("http://x.test", "events", "events")
    assert links(urls, "recent", 1) == (
        ("self", "http://x.test/recent"),
        ("via", "http://x.test/pages/1"),
    )
    assert links(urls, "recent", 3) == (
        ("self", "http://x.test/recent"),
        ("via", "http://x.test/pages/3"),
        ("prev-archive", "http://x.test/pages/2"),
    )
    assert links(urls, "working", 3) == (
        ("self", "http://x.test/pages/3"),
        ("current", "http://x.test/recent"),
        ("prev-archive", "http://x.test/pages/2"),
    )
    assert links(urls, "archive", 1) == (
        ("self", "http://x.test/pages/1"),
        ("current", "http://x.test/recent"),
        ("next-archive", "http://x.test/pages/2"),
    )
    named = Urls("http://x.test/", "orders", "events")
    assert dict(links(named, "archive", 2)) == {
        "self": "http://x.test/feeds/orders/pages/2",
        "current": "http://x.test/feeds/orders/recent",
        "prev-archive": "http://x.test/feeds/orders/pages/1",
        "next-archive": "http://x.test/feeds/orders/pages/3",
    }
