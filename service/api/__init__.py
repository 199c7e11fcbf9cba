"""The worker API (``crawlplan serve``): HTTP/JSON over the store for remote workers."""
