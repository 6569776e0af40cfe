"""What the algorithms are written against; each runtime implements these.

An algorithm owns its rule and nothing else: it never sees a clock, a process
or a socket. It reaches the network through the objects below, which the
simulator (``murmur.sim``) implements in memory on a virtual clock and the
distributed runtime (``murmur.distributed``) implements over gloo, one rank each.

Mini-batch SGD (DETSGRAD, DSGD, centralized SGD) is an :class:`Algorithm`:
three functions over a small state record whose tensors have the agent axis
first:

- ``init(params)``: the state, from the stacked initial parameters (agents, P);
- ``initial_sent(params)``: what every agent counts as having sent before its
  first message (what each neighbour holds of it at the start), from the same
  parameters: the parameters themselves, or more when messages carry more than
  the model;
- ``params(state)``: the parameters whose gradients are taken and evaluated;
- ``step(state, grads, iteration, transport)``: the next state, given the
  stacked mini-batch gradients at ``params(state)``. Communication goes through
  ``transport`` only;
- ``chosen_steps()``: the step sizes it chose for the run's graph (what ``"auto"``
  became), which the run's summary and ``murmur run --check`` report.

The state's tensors are large (agents x parameters), so ``step`` updates them in
place and may use ``grads`` as scratch space: the state passed in is consumed.
``grads`` belongs to the model and is overwritten by the next gradient call, so
the state must never keep a reference to it.

A :class:`Transport` offers three calls and three reads:

- ``broadcast(senders, values)``: each agent whose ``senders`` flag is set sends
  its row of ``values`` to every neighbour (one event, ``d_i`` point-to-point
  messages of ``P`` floats each);
- ``publish(update)``: agents send compressed differences to their public
  estimates (:mod:`murmur.algorithms.estimates`): every holder of x^_i (agent
  i and its neighbours) adds row i of ``update.delta``, so ``last_sent`` and
  what ``mix`` reads move by it; each sent segment is one event and ``d_i``
  messages of its encoded size;
- ``mix(operator, out, scale)``: ``out += scale * operator @ V`` in place, where
  row ``j`` of ``V`` is the last value agent ``j`` broadcast, i.e. what each
  agent can compute from its own last broadcast and the latest values received
  from its neighbours. ``operator`` must be zero outside the graph's edges and
  diagonal. Where messages get lost (the simulator's ``faults.drop``), agents
  may hold different values of one neighbour: row i of the result is then
  operator_ii times i's own last broadcast plus operator_ij times what i last
  received from each neighbour j;
- ``last_sent``: row ``i`` is the value agent ``i`` itself last broadcast (each
  agent keeps its own copy, so an event trigger can compare against it);
- ``agents``: the agents of the block, one per row (all of them in the
  simulator, the rank's own in the distributed runtime), so that each agent
  draws its own random numbers in both;
- ``graph``: the graph the agents talk over in this iteration, from which an
  algorithm derives its mixing weights: the run's graph, or in the simulator
  one graph of a time-varying topology (``topology.varying``). Links that are
  down and crashed agents (``[faults]``) are not taken out of it: the
  simulator's transport takes them out of ``mix`` itself, moving the weight of
  each such link to the diagonal (:mod:`murmur.sim.lossy`).

and two abilities that a transport may have, which every transport states:

- ``broadcast_all_overwriting(values)``: every agent sends its row of ``values``,
  whose numbers the caller overwrites next; a transport that holds every agent's
  values in one tensor (the simulator's) takes ``values``' memory as what was sent
  instead of copying it, the others broadcast from every agent;
- ``fused_mix``: a :class:`FusedMix`, the mixing step and a gradient step in one
  pass over the stacked state (the simulator's when a run is compiled), or None;
  the algorithms reach it through :mod:`murmur.algorithms.mixing`.

Layer-wise SSFN is a :class:`LayerSolver` that solves each layer's problem (a
:class:`LayerProblem`) through a :class:`LayerNetwork`: it gossips through
``transport_for``, and it reports its work (flops, gossip rounds, message sizes)
with ``work_alone``, ``work_in_rounds`` and ``run_async``; the simulator turns
that work into virtual time, the distributed runtime does the work for real and
ignores the estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

from murmur.algorithms.estimates import EstimateUpdate, Segments
from murmur.metrics.counters import MessageCounters
from murmur.topology import Graph


@dataclass(frozen=True)
class MixStep:
    """What one mixing step is given: ``out <- [out] + scale * operator @ V - alpha *
    grads``, V being what the agents last sent (no gradient step where ``grads`` is
    None)."""

    operator: torch.Tensor
    out: torch.Tensor
    """Updated in place."""
    grads: torch.Tensor | None = None
    alpha: float = 0.0
    scale: float = 1.0


Drift = Literal["none", "norms", "kept"]
"""What a mixing step gives of the drift ``out - V``: nothing, each row's norm, or each
row's norm with the drift itself left in the step's ``grads``."""


class FusedMix(Protocol):
    """A :class:`MixStep` in one pass over the stacked state."""

    def __call__(self, mix: MixStep, *, keep: bool, drift: Drift) -> torch.Tensor | None:
        """Update ``mix.out`` in place, adding to it with ``keep`` and replacing it
        otherwise; return the drift's norms per row unless ``drift`` is ``"none"``."""
        ...


class Transport(Protocol):
    """What a synchronous algorithm may do with the network."""

    counters: MessageCounters
    graph: Graph

    @property
    def agents(self) -> Sequence[int]: ...

    def broadcast(self, senders: torch.Tensor, values: torch.Tensor) -> None: ...

    def broadcast_all_overwriting(self, values: torch.Tensor) -> None:
        """Every agent sends its row of ``values``, whose numbers the caller overwrites
        next (they may be anything afterwards)."""
        ...

    def publish(self, update: EstimateUpdate) -> None: ...

    def mix(self, operator: torch.Tensor, out: torch.Tensor, scale: float = 1.0) -> None: ...

    @property
    def fused_mix(self) -> FusedMix | None:
        """The one-pass mixing step, where the transport has one (None: the algorithms
        mix through ``mix`` and step with separate torch calls)."""
        ...

    @property
    def last_sent(self) -> torch.Tensor: ...


@dataclass(frozen=True)
class BuildContext:
    """What an algorithm may need from its run besides its config and graph."""

    seed: int
    """The run's seed, from which the algorithm derives its own random streams."""
    segments: Segments | None
    """The model's parameter tensors in the flat vector (None for layer-wise training)."""


class Algorithm(Protocol):
    """A synchronous mini-batch algorithm over stacked agents; see the module docstring."""

    def init(self, params: torch.Tensor) -> Any: ...

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor: ...

    def params(self, state: Any) -> torch.Tensor: ...

    def step(
        self, state: Any, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> Any: ...

    def chosen_steps(self) -> dict[str, float]:
        """The step sizes chosen for the run's graph where the config said ``"auto"``
        (or a number): ``{"b": ..., "gamma": ...}``, the scale of each schedule."""
        ...


class Rule:
    """A base for an :class:`Algorithm` of one's own, with the parts most rules share:
    every agent's neighbours start out holding its initial parameters, and no step was
    chosen from the graph (override :meth:`chosen_steps` where one is)."""

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return params

    def chosen_steps(self) -> dict[str, float]:
        return {}


class Wrapped:
    """An algorithm stepped by a wrapper (under a fault schedule, over a varying graph):
    everything but its step is the wrapped algorithm's; subclasses define ``step``."""

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm

    def chosen_steps(self) -> dict[str, float]:
        return self.algorithm.chosen_steps()

    def init(self, params: torch.Tensor) -> Any:
        return self.algorithm.init(params)

    def initial_sent(self, params: torch.Tensor) -> torch.Tensor:
        return self.algorithm.initial_sent(params)

    def params(self, state: Any) -> torch.Tensor:
        return self.algorithm.params(state)


# ---------------------------------------------------------------- layer-wise training


@dataclass(frozen=True)
class Ridge:
    """Layer 0's regularizer lambda ||O||^2 (for the whole network)."""

    lam: float


@dataclass(frozen=True)
class Ball:
    """Layers >= 1: the constraint ||O||_F <= radius."""

    radius: float


Regularizer = Ridge | Ball
"""The regularizer of a layer's problem."""


@dataclass(frozen=True)
class RoundsWork:
    """One layer of a synchronous solver: every step waits for the slowest node."""

    setup_flops: Sequence[float]
    """Per node, before the first iteration (layer data, factorizations)."""
    update_flops: float
    """Per node and iteration: the local update."""
    mix_flops: Sequence[float]
    """Per node and gossip round: combining the neighbours' values."""
    message_bytes: int
    """Size of one gossip message."""
    rounds: int
    """Gossip rounds, all iterations together (0: nothing is sent)."""
    iterations: int


@dataclass(frozen=True)
class AsyncWork:
    """One layer of an asynchronous solver: each node works at its own pace."""

    setup_flops: Sequence[float]
    """Per node of this process, before its first update."""
    update_flops: float
    """Per update of a node."""
    values: int
    """Numbers in one pushed block."""
    dtype: torch.dtype
    """Their type."""
    relax: Callable[[list[Any]], None] | None = None
    """Where given, the nodes are :class:`BatchedAsyncNode`: a runtime may begin their
    updates and have this make the numbers of many at once (each node's the same as
    alone), before anything reads them."""

    @property
    def message_bytes(self) -> int:
        return self.values * self.dtype.itemsize


class AsyncNode(Protocol):
    """One node of an asynchronous solver, as a state machine the runtime drives:
    it tells the node what arrived and what failed, asks it what to do next, and
    carries its pushes."""

    index: int
    """The node's index in the graph."""
    updates: int
    """Updates made so far this layer."""
    finished: bool
    """Done with this layer: it takes no more news."""

    @property
    def neighbours(self) -> list[int]: ...

    @property
    def blocks(self) -> dict[int, torch.Tensor]:
        """The blocks of the latest update, per neighbour, as ``update`` returned them."""

    @property
    def stamp(self) -> int:
        """What the pushes of the latest update carry; it grows with every update."""

    def waiting_on(self) -> list[int]:
        """The neighbours whose news this node still needs."""

    def receive(self, sender: int, stamp: int, block: torch.Tensor) -> bool:
        """Take a neighbour's block; False if it is older than one already taken."""

    def drop(self, neighbour: int) -> None:
        """A neighbour failed: its edge leaves the problem."""

    def next_action(self) -> str:
        """``"update"``, ``"wait"`` (for news) or ``"done"`` (with this layer)."""

    def update(self) -> dict[int, torch.Tensor]:
        """One update; returns the block to push to each neighbour, with ``stamp``."""

    @property
    def solution(self) -> torch.Tensor:
        """The node's latest output matrix."""


class PendingUpdate(Protocol):
    """An update begun (its inputs read) whose numbers :attr:`AsyncWork.relax` makes."""

    neighbours: tuple[int, ...]
    done: bool
    """Its numbers are made: ``stamp`` and ``blocks`` hold them."""
    stamp: int
    blocks: dict[int, torch.Tensor]


class BatchedAsyncNode(AsyncNode, Protocol):
    """An :class:`AsyncNode` whose updates can wait to be made together."""

    def begin_update(self) -> PendingUpdate:
        """Begin an update on what has arrived so far (``update`` is this, made at once)."""


class PushChannel(Protocol):
    """One layer's messages of an asynchronous node that runs in a process of its own."""

    neighbours: list[int]
    """The neighbours still there when the layer began."""

    def push(self, blocks: dict[int, torch.Tensor], stamp: int) -> None:
        """Send ``blocks[j]`` to each neighbour j, without waiting; a newer push to j
        replaces one not yet on the wire."""

    def news(self) -> dict[int, tuple[int, torch.Tensor]]:
        """The newest ``(stamp, block)`` from each neighbour heard since the last call."""

    def failed(self) -> list[int]:
        """Neighbours found gone since the last call (never listed twice)."""

    def wait(self, needed: list[int]) -> None:
        """Until news or a failure; a neighbour of ``needed`` silent past the
        deadline is then failed."""

    def close(self) -> None:
        """The layer is done here: tell the neighbours after the last pushes."""


class LayerNetwork(Protocol):
    """What a layer solver may use: the graph, gossip, the message counters, and
    where it reports its work."""

    graph: Graph
    counters: MessageCounters

    @property
    def local_nodes(self) -> list[int]:
        """The nodes whose layer data this process holds, in order."""

    def live_neighbours(self, node: int) -> list[int]:
        """``node``'s neighbours still there (an asynchronous run drops failed ones)."""

    def begin_layer(self, layer: int) -> None:
        """Layer ``layer`` (0 first) is about to be solved (the simulator crashes nodes
        here)."""

    @property
    def crashed(self) -> frozenset[int]:
        """Nodes that crashed: they do no more work and their models stay as they were
        (the simulator's ``faults.crashes``; failed ranks leave a distributed run)."""

    def transport_for(self, width: int, dtype: torch.dtype) -> Transport:
        """A transport for one gossip phase: values of ``width`` floats, every node
        starting from zeros, messages added to ``counters``."""

    def total(self, values: torch.Tensor) -> torch.Tensor:
        """The sum over every node of the network of one row of ``values`` per node of
        this process ((local nodes, k) -> (k,)): what a synchronous solver's stopping
        rules agree on (in the distributed runtime, one all-reduce of k numbers)."""

    def work_alone(self, node: int, flops: float) -> None:
        """Node ``node`` computes ``flops`` operations, nobody waiting on anyone."""

    def work_in_rounds(self, work: RoundsWork) -> None:
        """A synchronous layer's work, reported once it is done."""

    def run_async(self, nodes: list[AsyncNode], work: AsyncWork) -> None:
        """Drive this process's asynchronous nodes until each is done with the layer."""

    @property
    def virtual_seconds(self) -> float | None:
        """Virtual time at which the last node finished (None: real time only)."""


@dataclass(frozen=True)
class LayerSolution:
    """What a layer solver found for the nodes of this process, and how hard it worked:
    one entry per local node in every list."""

    outputs: torch.Tensor
    """(local nodes, Q, n) output matrices."""
    steps: list[int]
    """ADMM iterations (synchronous, centralized) or updates (asynchronous) made."""
    rounds: list[int]
    """Gossip rounds, all iterations together (0: no gossip)."""
    residual: list[float]
    """The final relative residual the stopping rule looked at."""
    converged: list[bool]
    """Stopped because the residual met the tolerance (False: the cap stopped it)."""


@dataclass(frozen=True)
class LayerProblem:
    """One layer's problem for the nodes of this process (all of them in the
    simulator, one in the distributed runtime): one entry per local node m along the
    first axis of each tensor and in ``setup_flops``."""

    grams: torch.Tensor
    """(local nodes, n, n): G_m = Y_m^T Y_m of each node's layer features Y_m."""
    crosses: torch.Tensor
    """(local nodes, Q, n): C_m = T_m^T Y_m of each node's targets T_m and features."""
    regularizer: Regularizer
    """The ridge (layer 0) or the norm ball (later layers) on the output matrices."""
    setup_flops: list[float]
    """Local node m's work to build its layer data before solving; the solver reports
    it with its own."""


class LayerSolver(Protocol):
    """Solves one layer's problem for the nodes of this process."""

    def solve(self, problem: LayerProblem, network: LayerNetwork) -> LayerSolution: ...
