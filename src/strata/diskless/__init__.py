"""Diskless topics (KIP-1150 family): partitions whose data lives only in shared WAL objects.

A broker buffers produce requests for many partitions into one object, uploads it, and then asks the
*coordinator* (Inkless's "control plane") to commit it: the coordinator orders the batches, assigns
their offsets and keeps the per-partition metadata (log start, high watermark, last stable offset,
idempotence and transaction state). Fetches ask the coordinator which byte ranges of which objects
hold an offset. See ``strata.diskless.coordinator``.

Layering: this package sits between ``strata.broker`` and ``strata.coordinator``; the coordinator
state machine imports only ``strata.common``, ``strata.errors`` and the standard library.
"""
