"""Settings that make a synchronous SGD run of any preset small enough for a test:
six agents on blobs with an 8-unit hidden layer, 60 iterations, evaluated every 20."""

SMALL_SGD = [
    "data.dataset=blobs",
    "model.hidden=[8]",
    "topology.agents=6",
    "data.batch_size=8",
    "run.iterations=60",
    "run.eval_every=20",
]

RUN_FILES = ["agents.pt", "config.toml", "metrics.jsonl", "model.pt", "summary.json"]
"""What the folder of a finished mini-batch run holds, sorted."""
