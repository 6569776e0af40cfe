"""summary.json as runs write it, for the report and plot tests."""

from __future__ import annotations


def summary_for(name: str, algorithm: str, agents: int = 4, **fields) -> dict:
    summary = {
        "name": name,
        "preset": "default",
        "algorithm": algorithm,
        "dataset": "mnist5k",
        "agents": agents,
        "topology": "ring",
        "iterations": 300,
        "seed": 0,
        "accuracy": {"mean": 0.8, "min": 0.75, "max": 0.85, "per_agent": [0.8] * agents},
        "test_loss": 0.6,
        "events": 100,
        "events_per_agent": [25] * agents,
        "messages": 200,
        "bytes": 2_000_000,
        "communication_saving": 0.5,
        "consensus_distance": 0.01,
        "wall_seconds": 12.34,
        "train_seconds": 10.0,
        "samples": 9600,
        "samples_per_second": 960.0,
        "run_dir": "/elsewhere/" + name,
    }
    summary.update(fields)
    return summary


def worker_summary(
    name: str,
    workers: int,
    iterations_to_target: int | None,
    virtual_seconds_to_target: float | None,
    algorithm: str = "asysg-con",
    **fields,
) -> dict:
    """A summary as worker-based runs write it, training to a target loss of 0.25."""
    summary = summary_for(
        name,
        algorithm,
        agents=workers,
        topology="parameter server",
        communication_saving=None,
        virtual_seconds=virtual_seconds_to_target or 1.0,
        workers=workers,
        group=1,
        staleness={
            "mean": workers - 1.0,
            "max": workers - 1,
            "histogram": [1] * (workers - 1) + [100],
        },
        train_loss=0.24 if iterations_to_target else 1.7,
        target_loss=0.25,
        iterations_to_target=iterations_to_target,
        virtual_seconds_to_target=virtual_seconds_to_target,
        server_messages=99,
    )
    summary.update(fields)
    return summary


def stopped(
    summary: dict,
    iteration: int,
    status: str = "collapsed",
    rule: str = "chance",
    reason: str = "mean accuracy at chance for 3 evaluations",
) -> dict:
    """``summary`` as a run that a rule stopped early at ``iteration`` writes it."""
    return summary | {
        "status": status,
        "stopped": {"rule": rule, "iteration": iteration, "reason": reason},
    }
