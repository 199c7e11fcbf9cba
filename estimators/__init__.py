"""Pure computation on arrays: change-rate estimators, Last-Modified reliability, bucketing,
OPIC and reference PageRank.

Imports: the standard library, numpy, scipy, pandas. No I/O: functions take arrays and return
arrays; reading evidence from the store and writing estimates back is the service edge's job.

The Python API is exported here, lazily: ``import estimators`` is cheap (scipy.stats alone
takes most of a second to import), and a name's module is imported on first use.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
