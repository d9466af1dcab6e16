"""The ``.txnindex`` must hold Kafka's 34-byte entries and answer READ_COMMITTED fetches like Kafka."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strata.errors import KafkaStorageError
from strata.log.errors import CorruptIndexError, LogStateError
from strata.log.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex

TXNS = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 37, 50, 40),
]


def be(value: int, size: int) -> bytes:
    return value.to_bytes(size, "big", signed=True)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[TransactionIndex]:
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    yield idx
    idx.close()


def test_entry_is_34_bytes_big_endian_with_version_0(index: TransactionIndex) -> None:
    txn = AbortedTxn(0x0102030405060708, first_offset=5, last_offset=2**40 - 2, last_stable_offset=7)
    index.append(txn)
    expected = be(0, 2) + be(0x0102030405060708, 8) + be(5, 8) + be(2**40 - 2, 8) + be(7, 8)
    assert ENTRY_SIZE == 34 == len(expected)
    assert index.path.read_bytes() == expected
    assert txn.to_bytes() == expected


def test_created_only_on_first_append(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex(path, 100)
    try:
        assert not path.exists()
        assert index.is_empty
        assert index.all_aborted_txns() == []
        assert index.collect_aborted_txns(0, 1000) == ([], False)
        index.truncate_to(0)
        index.reset()
        index.flush()
        index.sanity_check()
        assert not path.exists()
        index.append(AbortedTxn(1, 100, 105, 106))
        assert path.stat().st_size == ENTRY_SIZE
        assert not index.is_empty
    finally:
        index.close()


def test_append_and_read_back(index: TransactionIndex) -> None:
    for txn in TXNS:
        index.append(txn)
    assert index.all_aborted_txns() == TXNS
    assert index.path.stat().st_size == 4 * ENTRY_SIZE


@pytest.mark.parametrize(
    ("fetch", "upper", "expected", "complete"),
    [
        (0, 100, TXNS, False),
        (0, 32, TXNS[:3], True),
        (0, 35, TXNS[:3], True),
        (10, 35, TXNS[:3], True),
        (11, 35, TXNS[1:3], True),
        (20, 41, TXNS[2:4], False),
        (0, 37, TXNS[:3], True),  # first offset == upper bound: excluded (the bound is exclusive)
        (0, 11, TXNS[:1], True),  # last stable offset == upper bound: complete
    ],
)
def test_collect_aborted_txns_bounds(
    index: TransactionIndex, fetch: int, upper: int, expected: list[AbortedTxn], complete: bool
) -> None:
    for txn in TXNS:
        index.append(txn)
    assert index.collect_aborted_txns(fetch, upper) == (expected, complete)


def test_last_offset_must_increase(index: TransactionIndex) -> None:
    index.append(AbortedTxn(0, 0, 10, 11))
    with pytest.raises(LogStateError):
        index.append(AbortedTxn(1, 5, 10, 11))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(1, 5, 9, 11))
    assert index.all_aborted_txns() == [AbortedTxn(0, 0, 10, 11)]


def test_reopened_index_still_checks_order(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    first = TransactionIndex(path, 0)
    first.append(AbortedTxn(0, 0, 10, 11))
    first.close()
    second = TransactionIndex(path, 0)
    try:
        with pytest.raises(LogStateError):
            second.append(AbortedTxn(1, 2, 8, 11))
        second.append(AbortedTxn(1, 2, 12, 13))
        assert second.all_aborted_txns() == [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 2, 12, 13)]
    finally:
        second.close()


def test_truncate_to(index: TransactionIndex) -> None:
    txns = [
        AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16),
        AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 37, 50, 40),
    ]
    for txn in txns:
        index.append(txn)
    index.truncate_to(51)
    assert index.all_aborted_txns() == txns
    index.truncate_to(50)
    assert index.all_aborted_txns() == txns[:3]
    assert index.path.stat().st_size == 3 * ENTRY_SIZE
    index.append(AbortedTxn(4, 36, 45, 46))  # allowed again: the last offset is now 35
    index.truncate_to(16)
    assert index.all_aborted_txns() == txns[:2]
    index.truncate_to(0)
    assert index.all_aborted_txns() == []
    index.append(AbortedTxn(5, 0, 1, 2))
    assert index.all_aborted_txns() == [AbortedTxn(5, 0, 1, 2)]


def test_reset_keeps_an_empty_file(index: TransactionIndex) -> None:
    index.append(AbortedTxn(0, 0, 10, 11))
    index.reset()
    assert index.path.exists()
    assert index.path.stat().st_size == 0
    assert index.is_empty
    index.append(AbortedTxn(0, 0, 5, 6))  # the order check restarted
    assert index.all_aborted_txns() == [AbortedTxn(0, 0, 5, 6)]


def test_sanity_check_rejects_partial_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(AbortedTxn(0, 0, 10, 11).to_bytes() + b"\x00" * 5)
    index = TransactionIndex(path, 0)
    try:
        assert index.all_aborted_txns() == [AbortedTxn(0, 0, 10, 11)]  # the partial tail is ignored
        with pytest.raises(CorruptIndexError, match="txnindex"):
            index.sanity_check()
    finally:
        index.close()


def test_sanity_check_rejects_unknown_version(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(b"\x00\x01" + AbortedTxn(0, 0, 10, 11).to_bytes()[2:])
    index = TransactionIndex(path, 0)
    try:
        with pytest.raises(CorruptIndexError, match="version 1"):
            index.sanity_check()
        with pytest.raises(CorruptIndexError):
            index.all_aborted_txns()
    finally:
        index.close()


def test_sanity_check_rejects_entry_before_segment_start(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000020.txnindex"
    index = TransactionIndex(path, 20)
    try:
        index.append(AbortedTxn(0, 0, 10, 11))
        with pytest.raises(CorruptIndexError, match="start offset 20"):
            index.sanity_check()
    finally:
        index.close()


def test_corrupt_index_error_is_storage_error() -> None:
    assert issubclass(CorruptIndexError, KafkaStorageError)


def test_rename_and_delete(index: TransactionIndex, tmp_path: Path) -> None:
    index.append(AbortedTxn(0, 0, 10, 11))
    old = index.path
    new = tmp_path / "00000000000000000000.txnindex.deleted"
    index.rename_to(new)
    assert index.path == new and new.exists() and not old.exists()
    index.append(AbortedTxn(1, 11, 12, 13))  # the open handle follows the renamed file
    assert index.all_aborted_txns() == [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 11, 12, 13)]
    assert index.delete_if_exists() is True
    assert not new.exists()
    assert index.delete_if_exists() is False


def test_rename_without_file_just_moves_the_path(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "a.txnindex", 0)
    index.rename_to(tmp_path / "b.txnindex")
    assert index.path == tmp_path / "b.txnindex"
    assert not index.path.exists()
    index.close()
