"""README.md's quickstart snippets run as written (only the bootstrap address is this test's broker),
twice in a row against the same broker, each in a fresh interpreter."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def quickstart_snippets() -> list[str]:
    section = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_says_what_to_install_for_the_snippets():
    section = README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert "pip install confluent-kafka 'kafka-python[zstd]'" in section
    assert len(quickstart_snippets()) == 2


@pytest.mark.parametrize("index, client", [(0, "confluent-kafka"), (1, "kafka-python")])
def test_quickstart_snippet_runs_twice(fresh_kshim, tmp_path, index, client):
    code = quickstart_snippets()[index]
    assert client in code.splitlines()[0] and "127.0.0.1:9092" in code
    script = tmp_path / "snippet.py"
    script.write_text(code.replace("127.0.0.1:9092", fresh_kshim.bootstrap))
    outputs = []
    for run in range(2):
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                             cwd=tmp_path)
        assert out.returncode == 0, f"run {run + 1} failed:\n{out.stdout}\n{out.stderr}"
        outputs.append(out.stdout)
    if client == "kafka-python":
        # each run appends one record and reads the partition from the start
        assert [len(re.findall(r"b'42 widgets'", o)) for o in outputs] == [1, 2]
    else:
        # the group resumes from its commits: each run reads the record it produced
        assert [o.split()[0] for o in outputs] == ["0", "1"]
