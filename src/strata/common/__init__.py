"""Value types and small ports shared by every layer; imports nothing from strata."""

from strata.common.clock import Clock, ManualClock, SystemClock
from strata.common.scheduler import ManualScheduler, Scheduler, ThreadScheduler
from strata.common.types import TopicPartition

__all__ = ["Clock", "ManualClock", "ManualScheduler", "Scheduler", "SystemClock", "ThreadScheduler",
           "TopicPartition"]
