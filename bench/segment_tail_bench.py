"""Finding a batch near an active segment's end: the segment's tail of recent batch positions against the
sparse offset index and the header scan after it, in the same run.

    .venv/bin/python bench/segment_tail_bench.py [--quick]

Followers, consumers at the log end and share-partition reads all start at a batch appended a moment ago, and
every read also looks up its upper bound (the high watermark). On small batches (one record of ~75 bytes,
``index.interval.bytes`` 4096: ~55 batches between index entries) the scan reads one header per batch with
``pread``. Writes bench/out/segment_tail_bench.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from strata.common.clock import ManualClock  # noqa: E402
from strata.config import LogConfig  # noqa: E402
from strata.log.segment import LogSegment  # noqa: E402
from strata.protocol.records import build_batch  # noqa: E402
from strata.protocol.records.batch import iter_batches  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    lookups = 5_000 if args.quick else 50_000
    with tempfile.TemporaryDirectory(prefix="segment-tail-") as tmp:
        segment = LogSegment(Path(tmp), 0, LogConfig(), ManualClock(), create=True)
        try:
            end = 0
            for _ in range(1000):  # 5,000 one-record batches, five per append as a produce request brings them
                records = b"".join(build_batch([b"v" * 8], base_offset=end + i, timestamp=1) for i in range(5))
                segment.append(records, list(iter_batches(records)))
                end += 5
            result: dict = {"batches": end, "lookups": lookups}
            tail = segment._tail
            for label in ("tail", "index_and_scan"):
                segment._tail = tail if label == "tail" else ([], [])
                started = time.perf_counter()
                for i in range(lookups):
                    segment.translate_offset(end - 1 - (i % 16))
                result[f"{label}_us"] = (time.perf_counter() - started) / lookups * 1e6
            segment._tail = tail
        finally:
            segment.close()
    result["ratio"] = result["tail_us"] / result["index_and_scan_us"]
    print(f"batch lookup near the active segment's end: tail {result['tail_us']:.2f} us, index + scan "
          f"{result['index_and_scan_us']:.1f} us (ratio {result['ratio']:.4f})")
    OUT.mkdir(exist_ok=True)
    (OUT / "segment_tail_bench.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
