"""URL patterns in the crawl scope: ``crawl.include`` and ``crawl.exclude`` (issue 27).

A discovered URL (link or redirect target) is followed when it is in the mode's scope, matches
one include pattern (or there are none) and no exclude pattern; seeds are never screened.
Unit tests of :class:`crawler.scope.CrawlScope`, the settings (crawlplan.toml, environment,
bad values), and a crawl of a loopback site whose own request log shows what was fetched.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.scope import CrawlScope
from crawler.worker import CrawlSettings
from service.config import load_settings
from service.errors import ConfigError
from store import Database, add_pages
from tests.loopback import PagesHost, html_page
from tests.test_unfetchable import _crawl, _pages

ON = "https://docs.example.org"


def test_include_only_narrows_the_mode() -> None:
    scope = CrawlScope("domains", include=("https://docs.example.org/en/*",))
    assert scope.follows("https://docs.example.org/en/intro.html", ON)
    assert scope.follows("https://docs.example.org/en/", ON)
    assert not scope.follows("https://docs.example.org/fr/intro.html", ON)
    assert not scope.follows("https://docs.example.org/en", ON)  # the whole URL must match
    assert not scope.follows("https://www.example.org/en/intro.html", ON)
    # The mode still applies first: an included URL on another domain is not followed.
    anywhere = CrawlScope("hosts", include=("*/en/*",))
    assert anywhere.follows("https://docs.example.org/en/a", ON)
    assert not anywhere.follows("https://other.example.com/en/a", ON)


def test_exclude_only() -> None:
    scope = CrawlScope("any", exclude=("*/private/*", "*.php"))
    urls = [
        "https://docs.example.org/a.html",
        "https://docs.example.org/private/b.html",
        "https://docs.example.org/x/private/c.html",
        "https://docs.example.org/report.php",
        "https://docs.example.org/report.php.html",
        "https://elsewhere.example.com/private",  # no slash after: not matched
    ]
    assert scope.followed(urls, ON) == [urls[0], urls[4], urls[5]]


def test_include_and_exclude_and_exclude_wins() -> None:
    scope = CrawlScope("any", include=("*/docs/*", "*/blog/*"), exclude=("*/docs/old/*",))
    assert scope.follows("https://e.org/docs/new/a.html", ON)
    assert scope.follows("https://e.org/blog/2026/post", ON)
    assert not scope.follows("https://e.org/docs/old/a.html", ON)  # included and excluded
    assert not scope.follows("https://e.org/shop/", ON)  # not included
    only = CrawlScope("any", include=("*/docs/*",), exclude=("*/docs/*",))
    assert not only.follows("https://e.org/docs/a", ON)


def test_patterns_with_query_strings() -> None:
    """``?`` is any one character, a literal ``?`` included; ``[?]`` is only a ``?``."""
    any_char = CrawlScope("any", exclude=("*?sort=*",))
    literal = CrawlScope("any", exclude=("*[?]sort=*",))
    assert not any_char.follows("https://e.org/list?sort=asc", ON)
    assert not any_char.follows("https://e.org/list/sort=asc", ON)
    assert not literal.follows("https://e.org/list?sort=asc", ON)
    assert literal.follows("https://e.org/list/sort=asc", ON)
    assert literal.follows("https://e.org/list?page=2", ON)
    # A pattern matches the whole URL, its query included.
    php = CrawlScope("any", exclude=("*.php",))
    assert php.follows("https://e.org/a.php?download=1", ON)
    assert not CrawlScope("any", exclude=("*.php*",)).follows("https://e.org/a.php?x=1", ON)
    search = CrawlScope("any", include=("https://e.org/search[?]q=*",))
    assert search.follows("https://e.org/search?q=crawl&page=2", ON)
    assert not search.follows("https://e.org/search/q=crawl", ON)


def test_patterns_are_case_sensitive() -> None:
    scope = CrawlScope("any", exclude=("*/Private/*",))
    assert not scope.follows("https://e.org/Private/a", ON)
    assert scope.follows("https://e.org/private/a", ON)


def test_no_patterns_is_the_mode_alone() -> None:
    assert CrawlScope() == CrawlScope("domains", include=(), exclude=())
    urls = ["https://www.example.org/a", "https://pypi.org/b", f"{ON}/c"]
    assert CrawlScope().followed(urls, ON) == [urls[0], urls[2]]
    assert CrawlScope("any").followed(urls, ON) == urls


def test_many_patterns_are_one_expression() -> None:
    excluded = tuple(f"*/section{i}/*" for i in range(300))
    scope = CrawlScope("any", include=("https://e.org/*",), exclude=excluded)
    assert not scope.follows("https://e.org/section0/a", ON)
    assert not scope.follows("https://e.org/x/section299/a", ON)
    assert scope.follows("https://e.org/section300/a", ON)
    assert scope.follows("https://e.org/section29", ON)
    # The workers of other processes get the scope pickled: the patterns survive.
    again = pickle.loads(pickle.dumps(CrawlSettings(scope=scope))).scope
    assert again == scope and not again.follows("https://e.org/section7/a", ON)


@pytest.mark.parametrize("bad", ["", "  ", 3, None])
def test_bad_patterns_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"crawl\.exclude: .* is not a URL glob pattern"):
        CrawlScope("any", exclude=("*/ok/*", bad))  # type: ignore[arg-type]


def test_patterns_from_the_file_and_the_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "crawlplan.toml"
    cfg.write_text(
        '[crawl]\nscope = "hosts"\ninclude = ["https://docs.example.org/en/*"]\n'
        'exclude = ["*/private/*", " *.php "]\n'
    )
    s = load_settings(config_file=cfg, environ={})
    assert s.values["crawl.include"] == ("https://docs.example.org/en/*",)
    assert s.values["crawl.exclude"] == ("*/private/*", "*.php")
    assert s.origins["crawl.exclude"] == str(cfg)
    scope = s.crawl_settings().scope
    assert scope == CrawlScope(
        "hosts", include=("https://docs.example.org/en/*",), exclude=("*/private/*", "*.php")
    )
    assert not scope.follows("https://docs.example.org/en/a.php", ON)
    # The environment (comma-separated, blanks around a pattern dropped) wins over the file.
    env = {"CRAWLPLAN_EXCLUDE": "*/s1/* , *[?]sort=*", "CRAWLPLAN_INCLUDE": "*"}
    s = load_settings(config_file=cfg, environ=env)
    assert s.values["crawl.exclude"] == ("*/s1/*", "*[?]sort=*")
    assert s.values["crawl.include"] == ("*",)
    assert s.origins["crawl.exclude"] == "$CRAWLPLAN_EXCLUDE"
    # An option (a list, as the Python API passes it) wins over both.
    s = load_settings({"crawl.exclude": ["*/x/*"]}, config_file=cfg, environ=env)
    assert s.crawl_settings().scope.exclude == ("*/x/*",)


def test_default_patterns_are_none_and_match_the_owner() -> None:
    values = load_settings({}, environ={}, config_file=None).values
    assert values["crawl.include"] == CrawlSettings().scope.include == ()
    assert values["crawl.exclude"] == CrawlSettings().scope.exclude == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[crawl]\nexclude = ["*/a/*", ""]\n', "crawl.exclude has an empty pattern in"),
        ("[crawl]\nexclude = [3]\n", "crawl.exclude pattern 3 is not a string: quote it"),
        ("[crawl]\ninclude = 3\n", "crawl.include must be a list of URL glob patterns"),
        ("[crawl]\ninclude = [[]]\n", "crawl.include pattern [] is not a string"),
        ('[crawl]\ninclude = {a = "b"}\n', "crawl.include must be a list of URL glob patterns"),
    ],
)
def test_bad_pattern_settings_are_named(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config_file=cfg, environ={})
    assert str(caught.value).startswith(f"{cfg}: ")
    assert message in str(caught.value)
    assert "e.g. " in str(caught.value)  # and how to write it


def test_bad_environment_pattern_is_named() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"CRAWLPLAN_EXCLUDE": "*/a/*,,*.php"}, config_file=None)
    assert str(caught.value).startswith("$CRAWLPLAN_EXCLUDE: crawl.exclude has an empty pattern")
    assert "CRAWLPLAN_EXCLUDE='*/private/*,*/print/*'" in str(caught.value)


@pytest.fixture
def site() -> Iterator[PagesHost]:
    """A site on loopback whose robots.txt allows everything, with a docs section, an
    ``s1`` subsection and its redirects into it, a PDF, a shop, and an ``S1`` (another
    path: patterns are case-sensitive)."""
    site = PagesHost(robots="User-agent: *\nDisallow:\n").start()
    site.pages.update(
        {
            "/index.html": html_page(
                "/docs/a.html",
                "/docs/s1/b.html",
                "/docs/page.html?print=1",
                "/shop/cart.html",
                "/docs/old.html",
                "/docs/search?q=s1",
            ),
            "/docs/a.html": html_page("/docs/s1/c.html", "/docs/S1/upper.html", "/index.html"),
            "/docs/s1/b.html": html_page("/docs/e.html"),
            "/docs/s1/c.html": html_page(),
            "/docs/s1/moved.html": html_page(),
            "/docs/s1/seeded.html": html_page("/docs/s1/d.html", "/docs/e.html"),
            "/docs/s1/d.html": html_page(),
            "/docs/S1/upper.html": html_page(),
            "/docs/e.html": html_page(),
            "/docs/page.html?print=1": html_page(),
            "/docs/search?q=s1": html_page(),
            "/shop/cart.html": html_page(),
        }
    )
    site.redirects["/docs/old.html"] = "/docs/s1/moved.html"
    yield site
    site.stop()


def test_crawl_never_requests_excluded_pages_but_fetches_seeds(
    db: Database, site: PagesHost
) -> None:
    """Excluded and not-included links and redirect targets are never requested nor stored;
    the rest of the site is crawled; a seed an exclude pattern matches is still fetched."""
    add_pages(
        db,
        [(site.url("/index.html"), site.origin), (site.url("/docs/s1/seeded.html"), site.origin)],
    )
    scope = CrawlScope(
        "hosts", include=(f"{site.origin}/docs/*",), exclude=("*/s1/*", "*[?]print=*")
    )
    stats = _crawl(db, scope)

    requested = [p for p in site.log if p != "/robots.txt"]
    expected = {
        "/index.html",  # a seed, though no include pattern matches it
        "/docs/s1/seeded.html",  # a seed, though an exclude pattern matches it
        "/docs/a.html",
        "/docs/old.html",  # requested; its redirect target is excluded
        "/docs/search?q=s1",  # the query has s1, not /s1/
        "/docs/S1/upper.html",  # case-sensitive: S1 is not s1
        "/docs/e.html",  # linked from the seed in /s1/
    }
    assert set(requested) == expected
    assert len(requested) == len(expected)  # each once
    assert not [p for p in site.log if "/s1/" in p and p != "/docs/s1/seeded.html"]
    assert {site.url(p) for p in expected} == set(_pages(db))  # nothing dropped was stored
    # Dropped and counted, 7: the index's /docs/s1/b.html, /docs/page.html?print=1 and
    # /shop/cart.html (not included); a.html's /docs/s1/c.html and /index.html (not included:
    # a link to a seed is screened like any other); old.html's redirect target; the seed's
    # /docs/s1/d.html.
    assert stats.out_of_scope == 7
