"""Remote object format v2's chunk codec (issue 29): fixed-size chunks, per-chunk zstd, envelope encryption.

A segment's bytes are cut into chunks of ``chunk.size`` bytes (the last one shorter). Each chunk is, in order:

1. compressed with zstd when compression is on (``cramjam``; Aiven's plugin does the same per chunk), unless the
   caller says the segment's batches are compressed by the producer already;
2. encrypted with AES-256-GCM when encryption is on, under the segment's own data key (a fresh random 256-bit
   key per segment), with a fresh random 96-bit IV per chunk and the chunk's number and the segment's random
   AAD as associated data, so a chunk moved to another place, or another segment, fails its tag. A stored
   chunk is ``IV(12) || ciphertext || tag(16)``, Aiven's layout.

The stored chunks are concatenated into one object (one PUT); the :class:`ChunkIndex` maps an original byte
range to the stored byte range holding it, so a ranged read stays one ranged GET. The data key is wrapped by
the active key-encryption key of the :class:`KeyRing` (RSA-OAEP with SHA-256, ``cryptography``'s
implementation: no hand-written crypto) and stored, with the KEK's id, beside the chunk index; rotating keys
re-wraps data keys (``strata bucket rewrap``) without rewriting a byte of data.

Everything here is pure (bytes in, bytes out): the RSM composes it with its store.
"""

from __future__ import annotations

import base64
import os
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import cramjam
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["ChunkIndex", "DecryptionError", "EncodedSegment", "KeyRing", "SegmentCodec"]

IV_BYTES = 12
TAG_BYTES = 16
DATA_KEY_BYTES = 32
AAD_BYTES = 32
_OAEP = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None)
_INDEX_MAGIC = b"SCI1"


class DecryptionError(Exception):
    """A stored chunk failed authentication (tampered, truncated, moved) or its key is not in the ring."""


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    """Original chunk size and file size, and the stored size of every chunk (they vary with compression)."""

    original_chunk_size: int
    original_size: int
    stored_sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        expected = -(-self.original_size // self.original_chunk_size) if self.original_size else 0
        if len(self.stored_sizes) != expected:
            raise ValueError(f"{len(self.stored_sizes)} stored chunks for {self.original_size} bytes in chunks of "
                             f"{self.original_chunk_size}")

    @property
    def stored_size(self) -> int:
        return sum(self.stored_sizes)

    def chunk_range(self, start: int, end: int) -> tuple[int, int]:
        """Chunks ``[first, last)`` that hold original bytes ``[start, end)``."""
        if not 0 <= start <= end <= self.original_size:
            raise ValueError(f"range [{start}, {end}) outside the segment's {self.original_size} bytes")
        size = self.original_chunk_size
        return start // size, -(-end // size)

    def stored_span(self, first: int, last: int) -> tuple[int, int]:
        """Stored byte range ``[start, end)`` of chunks ``[first, last)``."""
        start = sum(self.stored_sizes[:first])
        return start, start + sum(self.stored_sizes[first:last])

    def encode(self) -> bytes:
        """``magic | chunk size u32 | file size u64 | count u32 | count x stored size u32``, zstd-compressed."""
        raw = _INDEX_MAGIC + struct.pack(">IQI", self.original_chunk_size, self.original_size,
                                         len(self.stored_sizes))
        raw += struct.pack(f">{len(self.stored_sizes)}I", *self.stored_sizes)
        return bytes(cramjam.zstd.compress(raw))

    @classmethod
    def decode(cls, data: bytes) -> ChunkIndex:
        raw = bytes(cramjam.zstd.decompress(data))
        if raw[:4] != _INDEX_MAGIC or len(raw) < 20:
            raise ValueError("not a chunk index")
        chunk, size, count = struct.unpack_from(">IQI", raw, 4)
        if len(raw) != 20 + 4 * count or chunk <= 0:
            raise ValueError("chunk index of the wrong length")
        return cls(chunk, size, struct.unpack_from(f">{count}I", raw, 20))


class KeyRing:
    """Key-encryption keys by id (RSA key pairs from PEM files), Aiven's configuration under ``rsm.config.``:
    ``encryption.key.pair.id`` (the active one, which wraps new data keys), ``encryption.key.pairs`` (every id
    still needed to read old data), ``encryption.key.pairs.<id>.public.key.file`` / ``.private.key.file``; or
    the PEM text itself as ``.public.key`` / ``.private.key`` (a Spark job passes its key as an option: the
    executors need no file)."""

    def __init__(self, active: str, keys: Mapping[str, tuple[rsa.RSAPublicKey, rsa.RSAPrivateKey | None]]) -> None:
        if active not in keys:
            raise ValueError(f"encryption.key.pair.id={active} is not one of encryption.key.pairs {sorted(keys)}")
        self.active = active
        self._keys = dict(keys)

    @classmethod
    def from_config(cls, props: Mapping[str, str]) -> KeyRing:
        """Reads the PEM files; every problem is a ValueError naming its key."""
        ids = [i.strip() for i in props.get("encryption.key.pairs", "").split(",") if i.strip()]
        active = props.get("encryption.key.pair.id", "").strip()
        if not ids:
            raise ValueError("encryption.key.pairs: at least one key pair id is needed when encryption is enabled")
        keys: dict[str, tuple[rsa.RSAPublicKey, rsa.RSAPrivateKey | None]] = {}
        for key_id in ids:
            prefix = f"encryption.key.pairs.{key_id}"
            public = _pem(props, f"{prefix}.public.key", private=False)
            private = _pem(props, f"{prefix}.private.key", private=True)
            if public is None and isinstance(private, rsa.RSAPrivateKey):
                public = private.public_key()  # a reader given only its private key (a Spark executor)
            if public is None:
                raise ValueError(f"{prefix}.public.key.file is not set")
            assert isinstance(public, rsa.RSAPublicKey)
            keys[key_id] = (public, private if isinstance(private, rsa.RSAPrivateKey) else None)
        return cls(active, keys)

    def wrap(self, data_key: bytes, key_id: str | None = None) -> str:
        """``<kek id>:<base64 of the RSA-OAEP wrapped data key>`` (Aiven's form)."""
        key_id = key_id or self.active
        wrapped = self._keys[key_id][0].encrypt(data_key, _OAEP)
        return f"{key_id}:{base64.b64encode(wrapped).decode()}"

    def unwrap(self, wrapped: str) -> bytes:
        key_id, _, b64 = wrapped.partition(":")
        entry = self._keys.get(key_id)
        if entry is None or entry[1] is None:
            raise DecryptionError(f"the data key is wrapped by key pair {key_id!r}, whose private key is not in "
                                  f"encryption.key.pairs")
        try:
            return entry[1].decrypt(base64.b64decode(b64), _OAEP)
        except ValueError as e:
            raise DecryptionError(f"the data key does not unwrap with key pair {key_id!r}") from e

    def rewrap(self, wrapped: str) -> str:
        """The same data key wrapped by the active key pair (key rotation without touching the data)."""
        return self.wrap(self.unwrap(wrapped))


def _pem(props: Mapping[str, str], key: str, *, private: bool) -> object | None:
    """The key of ``<key>`` (PEM text) or ``<key>.file`` (a PEM file); None when neither is set. Errors name the
    setting, never the key material."""
    text, path = props.get(key), props.get(f"{key}.file")
    if text:
        return _parse(text.replace("\\n", "\n").encode(), key, None, private=private)
    if path:
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise ValueError(f"{key}.file={path}: {e}") from e
        return _parse(data, f"{key}.file", path, private=private)
    return None


def _parse(data: bytes, key: str, path: str | None, *, private: bool) -> object:
    try:
        return serialization.load_pem_private_key(data, None) if private else serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{key}{'=' + path if path else ''}: not a PEM {'private' if private else 'public'} "
                         f"key ({e})") from e


@dataclass(frozen=True, slots=True)
class EncodedSegment:
    """What a segment's manifest records about its stored form."""

    index: ChunkIndex
    compressed: bool
    wrapped_key: str | None  # None: not encrypted
    aad: bytes | None


COMPRESS_THREADS = max(1, min(2, os.cpu_count() or 1))
"""Chunks compressed at once during an encode: zstd (cramjam) releases the GIL, so a segment's upload uses a
second core while the first encrypts and writes."""
_compress_pool: ThreadPoolExecutor | None = None
_compress_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _compress_pool
    with _compress_pool_lock:
        if _compress_pool is None:
            _compress_pool = ThreadPoolExecutor(COMPRESS_THREADS, thread_name_prefix="zstd-encode")
        return _compress_pool


def _counted(chunks: Iterable[bytes], lengths: list[int]) -> Iterator[bytes]:
    for chunk in chunks:
        lengths.append(len(chunk))
        yield chunk


def _compress_ahead(chunks: Iterator[bytes], level: int) -> Iterator[bytes]:
    """zstd of each chunk, in order, with up to ``COMPRESS_THREADS`` chunks compressing at once."""
    if COMPRESS_THREADS == 1:
        for chunk in chunks:
            yield bytes(cramjam.zstd.compress(chunk, level=level))
        return
    pool = _pool()
    pending: deque[Future[bytes]] = deque()
    try:
        for chunk in chunks:
            pending.append(pool.submit(lambda c=chunk: bytes(cramjam.zstd.compress(c, level=level))))
            if len(pending) > COMPRESS_THREADS:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


class SegmentCodec:
    """Encode a segment chunk by chunk into one stored object; decode any original byte range of it."""

    def __init__(self, chunk_size: int, *, compression: bool = False, keyring: KeyRing | None = None,
                 level: int = 1) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk.size must be positive, got {chunk_size}")
        self.chunk_size = chunk_size
        self.compression = compression
        self.keyring = keyring
        self.level = level

    def encode(self, chunks: Iterable[bytes], original_size: int, write: Callable[[bytes], object], *,
               compress: bool | None = None, data_key: bytes | None = None) -> EncodedSegment:
        """``chunks``: the segment's bytes in pieces of exactly ``chunk_size`` (the last may be shorter);
        ``write``: appends to the stored object. ``compress=False`` skips compression (batches compressed by
        the producer already). ``data_key``: encrypt under this key (the caller wraps it once for several
        objects of a segment; the answer's ``wrapped_key`` is then None) instead of a fresh one of the ring."""
        compressed = self.compression if compress is None else (compress and self.compression)
        if data_key is None and self.keyring is not None:
            data_key = os.urandom(DATA_KEY_BYTES)
        aad = os.urandom(AAD_BYTES) if data_key is not None else None
        aes = AESGCM(data_key) if data_key is not None else None
        sizes: list[int] = []
        lengths: list[int] = []
        plain = _counted(chunks, lengths)
        for number, stored in enumerate(_compress_ahead(plain, self.level) if compressed else plain):
            if aes is not None:
                iv = os.urandom(IV_BYTES)
                stored = iv + aes.encrypt(iv, stored, _chunk_aad(aad, number))
            write(stored)
            sizes.append(len(stored))
        total = sum(lengths)
        if total != original_size:
            raise ValueError(f"encoded {total} bytes, the segment has {original_size}")
        wrapped = self.keyring.wrap(data_key) if self.keyring is not None and data_key is not None else None
        if wrapped is None and data_key is not None:
            return EncodedSegment(ChunkIndex(self.chunk_size, original_size, tuple(sizes)), compressed, None, aad)
        return EncodedSegment(ChunkIndex(self.chunk_size, original_size, tuple(sizes)), compressed, wrapped, aad)

    def decode(self, encoded: EncodedSegment, read_stored: Callable[[int, int], bytes | memoryview], start: int = 0,
               end: int | None = None,
               cache: tuple[Callable[[int], bytes | None], Callable[[int, bytes], None]] | None = None
               ) -> memoryview:
        """Original bytes ``[start, end)`` as a view of one buffer; ``read_stored(a, b)`` returns stored bytes
        ``[a, b)`` (one ranged GET, of the chunks not in ``cache``). ``cache``: ``(get(number), put(number,
        plain))`` of decoded chunks, so sequential windows that share a chunk decode it once. Raises
        DecryptionError for a chunk that fails its tag or does not decompress."""
        index = encoded.index
        end = index.original_size if end is None else end
        first, last = index.chunk_range(start, end)
        if first == last:
            return memoryview(b"")
        size = index.original_chunk_size
        chunk_end = min(last * size, index.original_size)
        out = bytearray(chunk_end - first * size)
        view = memoryview(out)
        got = cache[0] if cache is not None else None
        cached = {n: c for n in (first, last - 1) if got is not None and (c := got(n)) is not None}
        lo = first + 1 if first in cached else first
        hi = last - 1 if (last - 1) in cached and last - 1 >= lo else last
        for n, plain in cached.items():
            view[(n - first) * size:(n - first) * size + len(plain)] = plain
        if lo < hi:
            stored_start, stored_end = index.stored_span(lo, hi)
            data = memoryview(read_stored(stored_start, stored_end)).cast("B")
            if len(data) != stored_end - stored_start:
                raise DecryptionError(f"stored chunks {lo}-{hi - 1} are {len(data)} bytes, "
                                      f"{stored_end - stored_start} expected: the object is truncated")
            aes = None
            if encoded.wrapped_key is not None:
                if self.keyring is None:
                    raise DecryptionError("the segment is encrypted and encryption is not configured")
                aes = AESGCM(self.keyring.unwrap(encoded.wrapped_key))
            position = 0
            for number in range(lo, hi):
                stored: bytes | memoryview = data[position:position + index.stored_sizes[number]]
                position += index.stored_sizes[number]
                if aes is not None:
                    try:
                        stored = aes.decrypt(stored[:IV_BYTES], stored[IV_BYTES:], _chunk_aad(encoded.aad, number))
                    except InvalidTag as e:
                        raise DecryptionError(f"chunk {number} failed authentication (tampered or misplaced)") from e
                at = (number - first) * size
                length = min(size, index.original_size - number * size)
                target = view[at:at + length]
                if encoded.compressed:
                    try:
                        written = cramjam.zstd.decompress_into(stored, target)
                    except Exception as e:  # noqa: BLE001 - cramjam raises its own error types
                        raise DecryptionError(f"chunk {number} does not decompress: {e}") from e
                    if written != length:
                        raise DecryptionError(f"chunk {number} decompressed to {written} bytes, {length} expected")
                else:
                    if len(stored) != length:
                        raise DecryptionError(f"chunk {number} is {len(stored)} bytes, {length} expected")
                    target[:] = stored
                if cache is not None and number in (first, last - 1):
                    cache[1](number, bytes(target))
        offset = start - first * size
        return view[offset:offset + end - start]


def _chunk_aad(aad: bytes | None, number: int) -> bytes:
    return (aad or b"") + struct.pack(">Q", number)
