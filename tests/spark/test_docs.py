"""docs/spark.md's examples run as written, against a real broker and the local Spark.

Each ```python block of the page carries a mark on the line before it:

- ``<!-- docs-test: run -->``: run, in page order, in one namespace (a reader pasting the blocks into
  one session). The broker address and output paths are substituted; ``>>>`` blocks run like a
  doctest, their output compared with numbers and line breaks aside (sizes and counts depend on the data).
- ``<!-- docs-test: excerpt FILE -->``: an excerpt of FILE; ``...`` lines stand for lines left out,
  every other run of lines must be in FILE in that order (indentation aside).

The ``clicks`` topic the page reads holds JSON click events (the demo's schema), tiered, with the
timestamps the pushdown example filters on.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from tests.spark.datasets import create_topic, latest_tiered

from strata.client.cluster import KafkaCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "spark.md"
TOPIC, COPY = "clicks", "clicks-copy"
PARTITIONS = 3
EVENTS = 30_000
T0 = 1_700_000_000_000  # event i is stamped T0 + 20 i ms: the page's timestamp bound falls at i = 20_000
PAGES = ("/", "/search", "/product", "/cart")
MARK = re.compile(r"<!--\s*docs-test:\s*(?P<kind>run|excerpt)\s*(?P<arg>\S*)\s*-->")
FENCE = re.compile(r"^```(?P<info>.*)$")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    info: str
    code: str
    kind: str | None  # "run" | "excerpt" | None (no mark)
    arg: str


def blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown page, with the ``docs-test`` mark of the line before it."""
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j] != "```":
            j += 1
        mark = MARK.fullmatch(lines[start - 1].strip()) if start else None
        out.append(Block(start + 1, fence["info"].strip(), "\n".join(lines[start + 1:j]) + "\n",
                         mark["kind"] if mark else None, mark["arg"] if mark else ""))
        i = j + 1
    return out


def python_blocks() -> list[Block]:
    return [b for b in blocks(DOC.read_text()) if b.info.split()[:1] == ["python"]]


def test_every_python_block_of_the_page_is_marked() -> None:
    found = python_blocks()
    assert found, f"no python blocks in {DOC}"
    unmarked = [b.line for b in found if b.kind is None]
    assert not unmarked, f"{DOC.name}: python blocks at lines {unmarked} have no <!-- docs-test: ... --> mark"


def _chunks(code: str) -> list[list[str]]:
    """The excerpt's runs of lines between ``...`` lines, stripped, blank lines dropped."""
    chunks: list[list[str]] = [[]]
    for line in code.splitlines():
        if line.strip() == "...":
            chunks.append([])
        elif line.strip():
            chunks[-1].append(line.strip())
    return [c for c in chunks if c]


@pytest.mark.parametrize("block", [b for b in python_blocks() if b.kind == "excerpt"], ids=lambda b: f"line{b.line}")
def test_excerpts_are_still_in_their_files(block: Block) -> None:
    source = [line.strip() for line in (REPO_ROOT / block.arg).read_text().splitlines()]
    at = 0
    for chunk in _chunks(block.code):
        for i in range(at, len(source) - len(chunk) + 1):
            if source[i:i + len(chunk)] == chunk:
                at = i + len(chunk)
                break
        else:
            pytest.fail(f"{DOC.name} line {block.line}: these lines are not in {block.arg} (after line {at}):\n"
                        + "\n".join(chunk))


# -- running the page ------------------------------------------------------------------------------

def _normalized(text: str) -> str:
    return " ".join(NUMBER.sub("N", text).split())


def run_doctest(block: Block, namespace: dict[str, Any]) -> None:
    for example in doctest.DocTestParser().get_examples(block.code):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(example.source, f"{DOC.name}:{block.line}", "single"), namespace)  # noqa: S102
        got = out.getvalue()
        assert _normalized(got) == _normalized(example.want), (
            f"{DOC.name} line {block.line + example.lineno + 1}: {example.source.strip()}\n"
            f"page says:\n{example.want}got:\n{got}")


def run_block(block: Block, namespace: dict[str, Any], substitutions: dict[str, str]) -> None:
    code = block.code
    for literal, replacement in substitutions.items():
        code = code.replace(literal, replacement)
    if code.lstrip().startswith(">>>"):
        run_doctest(Block(block.line, block.info, code, block.kind, block.arg), namespace)
    else:
        exec(compile(code, f"{DOC.name}:{block.line}", "exec"), namespace)  # noqa: S102


def event(i: int) -> tuple[bytes, bytes, int]:
    """Key, JSON value and timestamp of click ``i`` (the demo's schema)."""
    user = f"u{i % 97}"
    value = {"user": user, "page": PAGES[i % len(PAGES)], "ms": 10 + i % 490, "ts": T0 + 20 * i}
    return user.encode(), json.dumps(value).encode(), T0 + 20 * i


def produce_clicks(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 20, "batch.size": 16384})  # ~0.8 MiB a partition: several segments
    for i in range(EVENTS):
        key, value, ts = event(i)
        producer.produce(TOPIC, value=value, key=key, partition=i % PARTITIONS, timestamp=ts)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def wait_some_tiered(bootstrap: str) -> None:
    """Some of every partition in the remote tier, so the page's plan reads from both tiers."""
    deadline = time.monotonic() + 120
    with KafkaCluster(bootstrap) as cluster:
        while min(latest_tiered(cluster, TOPIC, PARTITIONS).values()) < 0:
            assert time.monotonic() < deadline, "nothing of clicks tiered after 120 s"
            time.sleep(0.5)


def topic_size(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "docs-check"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS))
    finally:
        consumer.close()


def test_the_pages_examples_run_against_a_broker(spark: Any, broker: Any, tmp_path: Path) -> None:
    create_topic(broker.admin(), TOPIC, PARTITIONS, **{"remote.storage.enable": "true", "segment.bytes": str(128 << 10),
                                                       "retention.ms": "-1", "local.retention.bytes": "1"})
    create_topic(broker.admin(), COPY, PARTITIONS)
    produce_clicks(broker.bootstrap)
    wait_some_tiered(broker.bootstrap)

    substitutions = {'"127.0.0.1:9092"': repr(broker.bootstrap), '"out/"': repr(f"{tmp_path}/out/"),
                     '"cp/"': repr(f"{tmp_path}/cp/")}
    runnable = [b for b in python_blocks() if b.kind == "run"]
    used = {literal for literal in substitutions if any(literal in b.code for b in runnable)}
    assert used == set(substitutions), f"the page no longer uses {set(substitutions) - used}: update this test"
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    for block in runnable:
        run_block(block, namespace, substitutions)

    # What the page's code made is what the topic holds.
    assert namespace["df"].count() == EVENTS
    recent = sum(1 for i in range(20_000, EVENTS) if i % PARTITIONS == 1)
    assert namespace["recent"].count() == recent
    assert spark.read.parquet(str(tmp_path / "out")).count() == EVENTS
    assert topic_size(broker.bootstrap, COPY) == EVENTS


def test_the_default_save_mode_fails_with_a_message_naming_append(spark: Any) -> None:
    """Spark refuses ErrorIfExists (the default) for Python data sources; Overwrite, which its message
    offers, is refused by the sink with a message naming append."""
    df = spark.range(1).selectExpr("CAST(id AS STRING) AS value")

    def save(mode: str | None) -> str:
        writer = df.write.format("strata").option("kafka.bootstrap.servers", "127.0.0.1:1").option("topic", "t")
        with pytest.raises(Exception) as caught:  # noqa: PT011 - Spark's exception classes vary
            (writer.mode(mode) if mode else writer).save()
        return str(caught.value)

    assert '"Append"' in save(None)
    message = save("overwrite")
    assert "Save mode Overwrite not allowed" in message and '.mode("append")' in message
