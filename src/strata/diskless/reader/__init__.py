"""The diskless fetch path: read committed batches out of WAL objects and make them servable.

``plan`` groups a fetch's batches by object and tells hot objects (through the per-broker ``cache``)
from lagging ones (around it); ``complete`` copies, checks and patches each partition's batches
(absolute offsets, LogAppendTime); ``reader`` ties them together on the event loop.
"""

from strata.diskless.reader.cache import CacheStats, ObjectCache
from strata.diskless.reader.complete import ObjectBytes, PartitionRead, complete_partition
from strata.diskless.reader.plan import ObjectPlan, plan_reads
from strata.diskless.reader.reader import Reader, ReaderStats

__all__ = ["CacheStats", "ObjectBytes", "ObjectCache", "ObjectPlan", "PartitionRead", "Reader", "ReaderStats",
           "complete_partition", "plan_reads"]
