"""Layer-wise training (dSSFN) in the distributed runtime: one node per rank.

Synchronous dSSFN runs the simulator's layer driver on the rank's shard
(:func:`train_layerwise_rank`), each gossip phase through a
:class:`~murmur.runtime.distributed_transport.DistributedTransport` of float64
rows from :class:`DistributedNetwork`. ``murmur run --runtime distributed``
gathers each layer's record across the ranks (fixed-size tensors) and rank 0
writes it. The virtual clock is rank-local here, so the distributed records
and summary leave ``virtual_seconds`` out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from murmur.algorithms.ssfn import nme_db
from murmur.metrics.evaluation import accuracy_summary
from murmur.metrics.records import Outcome
from murmur.runtime.distributed_transport import DEFAULT_TIMEOUT, DistributedTransport, all_gather
from murmur.runtime.events import ComputeTimes, EventLoop, LinkDelays
from murmur.runtime.layerwise import LayerwiseResult, Network, train_layerwise
from murmur.runtime.mailbox import (
    PeerFailure,
    first_line,
)
from murmur.runtime.transport import MessageCounters
from murmur.seeding import derive_seed


@dataclass
class DistributedNetwork(Network):
    """The :class:`~murmur.runtime.layerwise.Network` of one node per rank: each gossip
    phase (``transport_for``) gets a :class:`DistributedTransport` of this rank's node,
    the previous phase's transport finished first. ``counters`` are this node's."""

    rank: int = 0
    timeout: float = DEFAULT_TIMEOUT
    group: Any = None
    control_messages: int = 0
    """NONE/STOP/PING headers this node sent, all gossip phases together."""
    rejected: int = 0
    """Malformed messages this node refused, all gossip phases together."""
    _transport: DistributedTransport | None = field(default=None, repr=False)

    def transport_for(self, width: int, dtype: torch.dtype) -> DistributedTransport:
        self.close()
        transport = DistributedTransport(
            self.group if self.group is not None else dist.group.WORLD,
            self.graph,
            self.rank,
            torch.zeros(self.graph.agents, width, dtype=dtype),
            self.timeout,
            counters=self.counters,
        )
        transport.start()
        self._transport = transport
        return transport

    def close(self) -> None:
        """Finish the current gossip phase with the neighbours, if one is open."""
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.finish()
            self.control_messages += transport.control_messages
            self.rejected += transport.rejected

    def abort(self, failed: Sequence[int]) -> None:
        if self._transport is not None:
            self._transport.abort(failed)


def train_layerwise_rank(
    setup: Any,
    solver: Any,
    rank: int,
    timeout: float = DEFAULT_TIMEOUT,
    on_record: Callable[[dict[str, Any]], None] = lambda record: None,
    network_out: list[DistributedNetwork] | None = None,
) -> tuple[LayerwiseResult, MessageCounters]:
    """Node ``rank`` of a layer-wise run (synchronous dSSFN) in a joined process group:
    its shard's layers, gossip with its neighbours. Returns its result (output
    matrices (1, Q, n); records of its own node) and its message counters.
    ``network_out``: the rank's :class:`DistributedNetwork` is appended to it (for
    its control-message and rejection counts)."""
    config, dataset, graph = setup.config, setup.dataset, setup.graph
    network = DistributedNetwork(
        graph=graph,
        counters=MessageCounters(1),
        clock=EventLoop(),
        compute=ComputeTimes(config.timing, graph.agents, derive_seed(config.run.seed, "timing")),
        links=LinkDelays(config.timing),
        rank=rank,
        timeout=timeout,
    )
    if network_out is not None:
        network_out.append(network)
    try:
        trained = train_layerwise(
            config.algorithm,
            solver,
            network,
            dataset.x_train,
            dataset.y_train,
            dataset.x_test,
            dataset.y_test,
            [setup.shards[rank]],
            dataset.num_classes,
            seed=derive_seed(config.run.seed, "ssfn"),
            on_record=on_record,
        )
        network.close()
    except PeerFailure as failure:
        network.abort(failure.ranks)
        raise
    except Exception:
        network.abort([rank])
        raise
    return trained, network.counters


# ---------------------------------------------------------------- the records of a run
_LAYER_COLUMNS = (
    "layer",
    "width",
    "admm_iterations",
    "test_accuracy",
    "test_loss",
    "train_accuracy",
    "train_residual",
    "train_target",
    "events",
    "messages",
    "bytes",
    "wall",
)
_LAYER_TOTALS = ("events", "messages", "bytes", "control", "rejected", "train_seconds")


def run_layerwise_rank(
    setup: Any,
    solver: Any,
    on_record: Callable[[dict[str, Any]], None],
    progress: bool,
    *,
    rank: int,
    timeout: float,
) -> Outcome:
    """Node ``rank`` of a synchronous dSSFN run; every layer's record gathered across
    the ranks and handed to ``on_record`` (rank 0 writes them). Without
    ``virtual_seconds``: each rank's virtual clock sees only its own node."""
    rows: list[list[float]] = []
    shard_size = float(setup.shards[rank].numel())

    def keep(record: dict[str, Any]) -> None:
        # One-hot targets: ||T_m||^2 is the shard's size, and the node's squared
        # residual comes back from its NME (dB) to within rounding.
        residual = shard_size * 10.0 ** (record["train_nme"] / 10.0)
        rows.append(
            [
                record["layer"],
                record["width"],
                record["admm_iterations"],
                record["test_accuracy"][0],
                record["test_loss"][0],
                record["train_accuracy"][0],
                residual,
                shard_size,
                record["events"],
                record["messages"],
                record["bytes"],
                record["wall_seconds"],
            ]
        )

    networks: list[DistributedNetwork] = []
    trained, counters = train_layerwise_rank(
        setup, solver, rank, timeout=timeout, on_record=keep, network_out=networks
    )
    try:
        return _gather_layerwise(setup, rows, trained, counters, networks[0], on_record)
    except RuntimeError as error:
        raise PeerFailure([], f"gathering the results failed: {first_line(error)}") from None


def _gather_layerwise(
    setup: Any,
    rows: list[list[float]],
    trained: LayerwiseResult,
    counters: MessageCounters,
    network: DistributedNetwork,
    on_record: Callable[[dict[str, Any]], None],
) -> Outcome:
    world = dist.get_world_size()
    gathered_rows = all_gather(torch.tensor(rows, dtype=torch.float64))  # (world, layers, cols)
    totals = all_gather(
        torch.tensor(
            [
                counters.events,
                counters.messages,
                counters.bytes,
                network.control_messages,
                network.rejected,
                trained.train_seconds,
            ],
            dtype=torch.float64,
        )
    )  # (world, totals)
    # Every kept layer's output matrices of every node (layers differ in width), for
    # the consensus distance.
    outputs = [all_gather(layer[0].contiguous()) for layer in trained.history]  # (world, Q, n)
    column = {name: i for i, name in enumerate(_LAYER_COLUMNS)}
    records = []
    for e in range(gathered_rows.shape[1]):
        at = gathered_rows[:, e]
        layer_outputs = outputs[e]
        mean = layer_outputs.mean(dim=0, keepdim=True)
        test = accuracy_summary(at[:, column["test_accuracy"]].tolist())
        train = accuracy_summary(at[:, column["train_accuracy"]].tolist())
        events = at[:, column["events"]].to(torch.int64)
        record = {
            "iteration": int(at[0, column["layer"]]),
            "layer": int(at[0, column["layer"]]),
            "width": int(at[0, column["width"]]),
            "admm_iterations": int(at[0, column["admm_iterations"]]),
            "test_accuracy": test["per_agent"],
            "test_loss": at[:, column["test_loss"]].tolist(),
            "accuracy_mean": test["mean"],
            "accuracy_min": test["min"],
            "accuracy_max": test["max"],
            "train_accuracy": train["per_agent"],
            "train_accuracy_mean": train["mean"],
            "train_nme": nme_db(
                float(at[:, column["train_residual"]].sum()),
                float(at[:, column["train_target"]].sum()),
            ),
            "consensus_distance": float((layer_outputs - mean).square().sum() / world),
            "events": int(events.sum()),
            "messages": int(at[:, column["messages"]].sum()),
            "bytes": int(at[:, column["bytes"]].sum()),
            "events_per_agent": events.tolist(),
            "wall_seconds": float(at[:, column["wall"]].max()),
        }
        on_record(record)
        records.append(record)

    total = {name: totals[:, i] for i, name in enumerate(_LAYER_TOTALS)}
    per_agent = {name: values.to(torch.int64).tolist() for name, values in total.items()}
    last = records[-1]
    graph = setup.graph
    return Outcome(
        agents=world,
        topology=graph.name,
        iterations=trained.admm_iterations,
        last_record=last,
        events_per_agent=per_agent["events"],
        messages=sum(per_agent["messages"]),
        bytes=sum(per_agent["bytes"]),
        train_seconds=float(total["train_seconds"].max()),
        samples=int(sum(shard.numel() for shard in setup.shards)),
        parameters=outputs[-1] if dist.get_rank() == 0 else None,
        extra={
            "layers": trained.sizes,
            "train_accuracy": accuracy_summary(last["train_accuracy"]),
            "train_nme": last["train_nme"],
            "admm_iterations": trained.admm_iterations,
            "mean_degree": float(graph.degrees().double().mean()),
            "runtime": "distributed",
            "world_size": world,
            "messages_per_agent": per_agent["messages"],
            "bytes_per_agent": per_agent["bytes"],
            "control_messages_per_agent": per_agent["control"],
            "rejected_per_agent": per_agent["rejected"],
        },
    )
