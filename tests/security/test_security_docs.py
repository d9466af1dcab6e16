"""docs/security.md's worked example, run as written: openssl certificates, a TLS+SCRAM broker with ACLs,
a user, a topic and ACLs made with bin/kafka-configs.sh, kafka-topics.sh and kafka-acls.sh, that user
producing and consuming, and the Authorization section's kafka-acls.sh examples.

Blocks marked ``<!-- docs-test: run -->`` run in page order in one directory: ``sh`` blocks with bash,
``python`` blocks in one namespace, a ``properties`` block marked ``run FILE`` is written to FILE. The
page's ports 9092/9093 become free ones; the broker is started from the page's ``server.properties``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strata.tools.zookeeper import free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
MARK = re.compile(r"<!--\s*docs-test:\s*run\s*(?P<file>\S*)\s*-->")
READY = re.compile(r"strata broker ready on")


def marked_blocks(text: str) -> list[tuple[str, str, str]]:
    """(language, file, code) of each block whose fence follows a run mark."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = MARK.search(line)
        if not m or i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            continue
        lang = lines[i + 1][3:].strip()
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        out.append((lang, m.group("file"), "\n".join(lines[i + 2:end]) + "\n"))
    return out


def test_the_worked_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ports = {"9092": str(free_port()), "9093": str(free_port())}

    def local(code: str) -> str:
        return re.sub(r"127\.0\.0\.1:(9092|9093)", lambda m: f"127.0.0.1:{ports[m.group(1)]}", code)

    monkeypatch.chdir(tmp_path)
    blocks = marked_blocks(DOC.read_text())
    assert [b[0] for b in blocks] == ["sh", "properties", "sh", "python", "sh"]
    (tmp_path / "bin").symlink_to(DOC.parents[1] / "bin")  # the page runs bin/kafka-*.sh from the repository
    namespace: dict[str, object] = {}
    broker: subprocess.Popen[bytes] | None = None
    log_path = tmp_path / "broker.log"
    try:
        for lang, file, code in blocks:
            if lang == "sh":
                done = subprocess.run(["bash", "-euo", "pipefail", "-c", local(code)], timeout=120, capture_output=True,
                                      text=True)
                assert done.returncode == 0, f"{code}\n{done.stdout}\n{done.stderr}"
            elif lang == "properties":
                Path(file).write_text(local(code))
                with open(log_path, "wb") as out:
                    broker = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--config", file],
                                              stdout=out, stderr=subprocess.STDOUT)
                deadline = time.monotonic() + 30
                while not READY.search(log_path.read_text(errors="replace")):
                    assert broker.poll() is None, log_path.read_text()
                    assert time.monotonic() < deadline, log_path.read_text()
                    time.sleep(0.05)
            else:
                exec(compile(local(code), str(DOC), "exec"), namespace)  # noqa: S102 - the page's own example
        assert namespace["seen"] and len(namespace["seen"]) == 10  # type: ignore[arg-type]
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(30)
