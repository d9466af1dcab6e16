"""Fixtures for the remote storage tests: the SeaweedFS server and real segments built by Strata's log."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.segments import MakeSegment, segment_factory


@pytest.fixture
def make_segment(tmp_path: Path) -> MakeSegment:
    """``make_segment(batches=20, records=5, value_size=1000, txn=False, topic=..., partition=0, topic_id=None)``."""
    return segment_factory(tmp_path)
