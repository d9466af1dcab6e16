"""Remote object format v2's chunk codec: chunks, zstd, AES-256-GCM under a per-segment data key wrapped by an
RSA key ring (issue 29, part 1). Pure functions, so checked here byte for byte; the RSM wiring has its own tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.keys import write_key_pair

from strata.tiered.storage.envelope import ChunkIndex, DecryptionError, KeyRing, SegmentCodec


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("keys")
    return {**write_key_pair(d, "k1"), **write_key_pair(d, "k2")}


def ring(keys: dict[str, str], active: str = "k1", ids: str = "k1,k2") -> KeyRing:
    return KeyRing.from_config({**keys, "encryption.key.pair.id": active, "encryption.key.pairs": ids})


def encode(codec: SegmentCodec, data: bytes, **kw: bool) -> tuple[bytes, object]:
    stored = bytearray()
    chunks = [data[i:i + codec.chunk_size] for i in range(0, len(data), codec.chunk_size)]
    encoded = codec.encode(chunks, len(data), stored.extend, **kw)
    return bytes(stored), encoded


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000), chunk=st.integers(1, 700), compression=st.booleans(),
       cuts=st.lists(st.integers(0, 5000), min_size=2, max_size=2))
def test_every_range_decodes_to_the_original_bytes(keys: dict[str, str], data: bytes, chunk: int,
                                                   compression: bool, cuts: list[int]) -> None:
    for keyring in (None, ring(keys)):
        codec = SegmentCodec(chunk, compression=compression, keyring=keyring)
        stored, encoded = encode(codec, data)
        start, end = sorted(min(c, len(data)) for c in cuts)
        reads: list[tuple[int, int]] = []

        def read(a: int, b: int, stored: bytes = stored, reads: list[tuple[int, int]] = reads) -> bytes:
            reads.append((a, b))
            return stored[a:b]

        assert codec.decode(encoded, read, start, end) == data[start:end]  # type: ignore[arg-type]
        assert len(reads) <= 1  # one ranged read of the stored object
        assert ChunkIndex.decode(encoded.index.encode()) == encoded.index  # type: ignore[attr-defined]


def test_no_plaintext_in_the_stored_object_and_compression_shrinks_it(keys: dict[str, str]) -> None:
    data = b'{"user":"alice","action":"login","secret":"hunter2"}\n' * 2000
    plain, _ = encode(SegmentCodec(4096, compression=True), data)
    assert len(plain) < len(data) // 10
    stored, _ = encode(SegmentCodec(4096, compression=True, keyring=ring(keys)), data)
    assert b"hunter2" not in stored and b"alice" not in stored
    stored, _ = encode(SegmentCodec(4096, keyring=ring(keys)), data)
    assert b"hunter2" not in stored and len(stored) == len(data) + (len(data) // 4096 + 1) * 28


def test_a_flipped_byte_or_a_moved_chunk_fails_authentication(keys: dict[str, str]) -> None:
    codec = SegmentCodec(1000, keyring=ring(keys))
    data = os.urandom(5000)
    stored, encoded = encode(codec, data)
    flipped = bytearray(stored)
    flipped[2500] ^= 1
    with pytest.raises(DecryptionError, match="authentication"):
        codec.decode(encoded, lambda a, b: bytes(flipped[a:b]))  # type: ignore[arg-type]
    size = encoded.index.stored_sizes[0]  # type: ignore[attr-defined]
    swapped = stored[size:2 * size] + stored[:size] + stored[2 * size:]  # chunks 0 and 1 exchanged
    with pytest.raises(DecryptionError):
        codec.decode(encoded, lambda a, b: swapped[a:b], 0, 2000)  # type: ignore[arg-type]
    with pytest.raises(DecryptionError, match="truncated"):
        codec.decode(encoded, lambda a, b: stored[a:b - 1])  # type: ignore[arg-type]


def test_rotation_old_data_readable_rewrap_moves_it_and_the_old_key_can_go(keys: dict[str, str]) -> None:
    data = os.urandom(3000)
    old = SegmentCodec(1024, keyring=ring(keys, active="k1"))
    stored, encoded = encode(old, data)
    assert encoded.wrapped_key.startswith("k1:")  # type: ignore[attr-defined]
    rotated = ring(keys, active="k2")
    assert SegmentCodec(1024, keyring=rotated).decode(encoded, lambda a, b: stored[a:b]) == data  # type: ignore
    from dataclasses import replace

    rewrapped = replace(encoded, wrapped_key=rotated.rewrap(encoded.wrapped_key))  # type: ignore[arg-type]
    assert rewrapped.wrapped_key.startswith("k2:")
    only_new = {k: v for k, v in keys.items() if ".k1." not in k}
    k2_only = SegmentCodec(1024, keyring=ring(only_new, active="k2", ids="k2"))
    assert k2_only.decode(rewrapped, lambda a, b: stored[a:b]) == data
    with pytest.raises(DecryptionError, match="k1"):
        k2_only.decode(encoded, lambda a, b: stored[a:b])  # type: ignore[arg-type]


def test_key_ring_configuration_errors_name_the_key(keys: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="encryption.key.pairs"):
        KeyRing.from_config({"encryption.key.pair.id": "k1"})
    with pytest.raises(ValueError, match="encryption.key.pair.id=k3"):
        ring(keys, active="k3")
    with pytest.raises(ValueError, match="encryption.key.pairs.k1.public.key.file"):
        KeyRing.from_config({"encryption.key.pairs": "k1", "encryption.key.pair.id": "k1"})
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    with pytest.raises(ValueError, match=f"encryption.key.pairs.k1.public.key.file={bad}"):
        KeyRing.from_config({"encryption.key.pairs": "k1", "encryption.key.pair.id": "k1",
                             "encryption.key.pairs.k1.public.key.file": str(bad)})
