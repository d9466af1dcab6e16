"""The diskless produce path: the WAL writer (Inkless's ``produce`` package).

:class:`Writer` buffers validated produce requests of diskless partitions into an active file, closes
it into a multi-partition WAL object, uploads it, commits it to the coordinator in rotation order and
answers each partition. Modules: ``model`` (entries, results, ports), ``active_file`` (buffering and
object layout), ``object_key`` (time-ordered keys), ``timer``, ``stats``, ``config`` and ``writer``.
"""

from strata.diskless.writer.config import WriterConfig
from strata.diskless.writer.model import (
    CommitFn,
    SafeDeleteFn,
    WriteEntry,
    WriterClosedError,
    WriteResult,
    aggregate,
)
from strata.diskless.writer.object_key import DEFAULT_PREFIX, new_object_key, parse_object_key, validate_prefix
from strata.diskless.writer.stats import WriterStats
from strata.diskless.writer.timer import LoopTimer, ManualTimer, Timer, TimerHandle
from strata.diskless.writer.writer import Writer

__all__ = [
    "DEFAULT_PREFIX", "CommitFn", "LoopTimer", "ManualTimer", "SafeDeleteFn", "Timer", "TimerHandle", "WriteEntry",
    "WriteResult", "Writer", "WriterClosedError", "WriterConfig", "WriterStats", "aggregate", "new_object_key",
    "parse_object_key", "validate_prefix",
]
