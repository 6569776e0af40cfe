"""A user's CSV file in the distributed runtime: every rank reads the same file and
checks the SHA-256 its plan carries."""

from __future__ import annotations

import hashlib
import json
import tomllib

from ranks import launch, read_records

TOML = """
[run]
seed = 1
iterations = 20
eval_every = 10
[data]
dataset = "file"
path = "{path}"
batch_size = 8
[model]
name = "mlp"
hidden = [8]
[topology]
graph = "ring"
agents = 2
[algorithm]
name = "dsgd"
a = 0.2
b = 0.3
"""


def test_two_ranks_train_on_a_csv_file_of_ones_own(tmp_path):
    data = tmp_path / "data.csv"
    rows = [f"{i % 5},{(i * 7) % 11},{i % 2}" for i in range(80)]
    data.write_text("u,v,label\n" + "\n".join(rows) + "\n")
    config = tmp_path / "config.toml"
    config.write_text(TOML.format(path=data))
    out = tmp_path / "run"
    argv = ["launch", "--nproc", "2", str(config), "--out", str(out), "--quiet"]
    done = launch([*argv, "--timeout", "20"])
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["agents"], summary["runtime"], summary["dataset"]) == (2, "distributed", "file")
    assert [r["iteration"] for r in read_records(out)] == [0, 10, 20]
    saved = tomllib.loads((out / "config.toml").read_text())["data"]
    assert saved["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
