"""kazoo is imported by one module only (strata.cluster.zk): its threads must never reach the event
loop's code, and its blocking calls never run on the loop."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "strata"
ALLOWED = {SRC / "cluster" / "zk.py"}


def test_only_cluster_zk_imports_kazoo() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "kazoo" or n.startswith("kazoo.") for n in names) and path not in ALLOWED:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not offenders, offenders
    assert ALLOWED.pop().exists()
