"""Pure computation on arrays: change-rate estimators, Last-Modified reliability, bucketing,
OPIC and reference PageRank.

Imports: the standard library, numpy, scipy, pandas. No I/O: functions take arrays and return
arrays; reading evidence from the store and writing estimates back is the service edge's job.
"""
