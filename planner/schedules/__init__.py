"""Page-level refresh schedules: how often to crawl each page for a given bandwidth.

Imports: numpy, scipy. Nothing else of ``planner``: a schedule needs only rates and weights.
"""
