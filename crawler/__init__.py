"""I/O with the web: fetching, robots.txt, politeness, parsing, signatures, the worker pool.

Imports: the standard library, ``store`` (or the lease API client), ``estimators`` (for OPIC
updates), ``requests`` (and ``urllib3``, its transport, to tell its errors apart) and the
parsing libraries (``w3lib`` for URL normalization, ``publicsuffixlist`` for the crawl
scope's registered domains). Never
``planner`` or ``scenarios``: the crawler executes leases, it does not decide what to crawl.
"""
