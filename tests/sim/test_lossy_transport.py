"""The lossy transport: one mailbox per directed edge, each message lost with
probability ``drop`` from a seeded stream; with no loss it is the lossless
transport bit for bit."""

from __future__ import annotations

import math

import pytest
import torch

from murmur.algorithms.beer import Beer, BeerConfig
from murmur.algorithms.choco import Choco, ChocoConfig
from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.algorithms.detsgrad_gt import DetsgradGt, DetsgradGtConfig
from murmur.algorithms.dsgd import Dsgd, DsgdConfig
from murmur.algorithms.estimates import Segments
from murmur.algorithms.protocols import BuildContext
from murmur.algorithms.sparq import Sparq, SparqConfig
from murmur.seeding import generator
from murmur.sim.lossy import LossyTransport
from murmur.sim.transport import InMemoryTransport
from murmur.topology import Graph, as_sparse, ring, star

P, STEPS = 40, 50
SEGMENTS = Segments((24, 4, 10, 2))
CONTEXT = BuildContext(seed=0, segments=SEGMENTS)
GRAPH = Graph(
    6, torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0], [0, 3], [1, 4]]), "chords"
)
"""Degrees 2 and 3: an irregular graph."""

ALGORITHMS = {
    "dsgd-cta": lambda: Dsgd(DsgdConfig(a=0.1), GRAPH),
    "dsgd-atc-metropolis": lambda: Dsgd(
        DsgdConfig(a=0.1, weights="metropolis", order="atc"), GRAPH
    ),
    "detsgrad": lambda: Detsgrad(DetsgradConfig(a=0.1, v0=2.0), GRAPH, CONTEXT),
    "detsgrad-layer-topk": lambda: Detsgrad(
        DetsgradConfig(a=0.1, v0=2.0, trigger="layer", compress="topk", fraction=0.3),
        GRAPH,
        CONTEXT,
    ),
    "detsgrad-gt": lambda: DetsgradGt(DetsgradGtConfig(a=0.1, v0=2.0, vy=1.0), GRAPH, CONTEXT),
    "detsgrad-gt-randk": lambda: DetsgradGt(
        DetsgradGtConfig(a=0.1, v0=2.0, vy=1.0, compress="randk", fraction=0.5), GRAPH, CONTEXT
    ),
    "choco-sgd": lambda: Choco(ChocoConfig(a=0.1), GRAPH, CONTEXT),
    "sparq-sgd": lambda: Sparq(SparqConfig(a=0.1, local_steps=2), GRAPH, CONTEXT),
}


def _lossy(initial: torch.Tensor, drop: float, seed: int = 0) -> LossyTransport:
    return LossyTransport(GRAPH, initial, drop, generator(seed, "faults"))


def _trajectory(algorithm, make_transport, steps: int = STEPS):
    """Run ``algorithm`` on fixed gradients; the final models and the transport."""
    initial = torch.randn(GRAPH.agents, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(steps, GRAPH.agents, P, generator=torch.Generator().manual_seed(1))
    transport = make_transport(algorithm.initial_sent(initial))
    state = algorithm.init(initial)
    for step in range(steps):
        state = algorithm.step(state, grads[step].clone(), step, transport)
    return algorithm.params(state), transport


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_without_losses_it_gives_the_lossless_parameters_and_counts_bit_for_bit(name):
    lossless, plain = _trajectory(ALGORITHMS[name](), lambda v: InMemoryTransport(GRAPH, v))
    lossy, mailboxes = _trajectory(ALGORITHMS[name](), lambda v: _lossy(v, 0.0))
    assert torch.equal(lossy, lossless)
    assert torch.equal(mailboxes.last_sent, plain.last_sent)
    assert mailboxes.counters.events_per_agent.tolist() == plain.counters.events_per_agent.tolist()
    assert mailboxes.counters.messages == plain.counters.messages > 0
    assert mailboxes.counters.bytes == plain.counters.bytes
    assert mailboxes.dropped == 0


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_the_same_seed_loses_the_same_messages_and_another_seed_others(name):
    first, one = _trajectory(ALGORITHMS[name](), lambda v: _lossy(v, 0.3, seed=1))
    again, same = _trajectory(ALGORITHMS[name](), lambda v: _lossy(v, 0.3, seed=1))
    other, another = _trajectory(ALGORITHMS[name](), lambda v: _lossy(v, 0.3, seed=2))
    assert torch.equal(first, again)
    assert one.dropped_per_agent.tolist() == same.dropped_per_agent.tolist()
    assert one.dropped > 0
    assert not torch.equal(first, other)
    assert one.dropped_per_agent.tolist() != another.dropped_per_agent.tolist()


def test_a_lost_message_leaves_that_receiver_its_last_value_and_others_the_new_one():
    graph = star(4)  # hub 0 and leaves 1, 2, 3
    transport = LossyTransport(graph, torch.zeros(4, 2), 0.5, generator(3, "faults"))
    values = torch.arange(8, dtype=torch.float32).reshape(4, 2) + 1
    transport.broadcast(torch.tensor([True, False, False, False]), values)
    arrived = {leaf: torch.equal(transport.view(leaf, 0), values[0]) for leaf in (1, 2, 3)}
    assert transport.dropped == list(arrived.values()).count(False) > 0
    assert any(arrived.values())
    assert torch.equal(transport.last_sent[0], values[0])
    assert torch.equal(transport.view(0, 0), values[0])
    # Each leaf mixes its own value and what it holds of the hub: its own row of W.
    mixed = torch.zeros(4, 2)
    transport.mix(as_sparse(graph.laplacian()), out=mixed)
    for leaf, got in arrived.items():
        torch.testing.assert_close(mixed[leaf], -values[0] if got else torch.zeros(2))
    assert transport.counters.messages == 3
    assert transport.counters.bytes == 3 * 2 * 4
    with pytest.raises(ValueError, match="^agent 1 is not a neighbour of agent 2$"):
        transport.view(1, 2)


def test_the_lost_share_of_many_messages_is_close_to_the_drop_probability():
    drop, rounds = 0.3, 400
    transport = _lossy(torch.zeros(GRAPH.agents, 1), drop)
    everyone = torch.ones(GRAPH.agents, dtype=torch.bool)
    for _ in range(rounds):
        transport.broadcast(everyone, torch.zeros(GRAPH.agents, 1))
    messages = transport.counters.messages
    assert messages == rounds * 2 * GRAPH.edges.shape[0]
    # Binomial(messages, drop): 5 standard deviations either side.
    spread = 5 * math.sqrt(messages * drop * (1 - drop))
    assert abs(transport.dropped - messages * drop) < spread


def test_a_lost_compressed_difference_leaves_the_receivers_estimate_behind():
    choco = Choco(ChocoConfig(a=0.1, compress="none", gamma=0.5), GRAPH, CONTEXT)
    _, transport = _trajectory(choco, lambda v: _lossy(v, 0.3), steps=5)
    edges = zip(transport.senders.tolist(), transport.receivers.tolist(), strict=True)
    behind = [
        not torch.equal(transport.view(receiver, sender), transport.last_sent[sender])
        for sender, receiver in edges
    ]
    assert transport.dropped > 0 and any(behind)


def _resending(initial: torch.Tensor, drop: float, seed: int = 0) -> LossyTransport:
    return LossyTransport(GRAPH, initial, drop, generator(seed, "faults"), resend=True)


def _owed_views(transport: LossyTransport) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(what each receiver holds of its sender plus what it is owed, the sender's own
    estimate) for every directed edge."""
    edges = zip(transport.senders.tolist(), transport.receivers.tolist(), strict=True)
    return [
        (transport.view(receiver, sender) + transport.owed[edge], transport.last_sent[sender])
        for edge, (sender, receiver) in enumerate(edges)
    ]


@pytest.mark.parametrize("name", ["choco-sgd", "sparq-sgd", "detsgrad-gt-randk"])
def test_with_resend_every_estimate_is_the_senders_less_what_it_is_owed(name):
    """Lost differences are owed, not lost: after every step, held + owed = own."""
    algorithm = ALGORITHMS[name]()
    initial = torch.randn(GRAPH.agents, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(STEPS, GRAPH.agents, P, generator=torch.Generator().manual_seed(1))
    transport = _resending(algorithm.initial_sent(initial), 0.3)
    state = algorithm.init(initial)
    for step in range(STEPS):
        state = algorithm.step(state, grads[step].clone(), step, transport)
        for held, own in _owed_views(transport):
            torch.testing.assert_close(held, own, rtol=0, atol=1e-5)
    assert transport.dropped > 0 and bool((transport.owed_bytes >= 0).all())
    plain = _trajectory(ALGORITHMS[name](), lambda v: _lossy(v, 0.3))[1]
    assert transport.counters.bytes > plain.counters.bytes  # the owed codes went again


def test_with_resend_a_lost_value_goes_again_without_an_event():
    """Agent 0 sends once; what is lost reaches its neighbours at the next steps,
    as messages that are no event."""
    graph = ring(4)
    transport = LossyTransport(graph, torch.zeros(4, 2), 0.5, generator(5, "faults"), resend=True)
    transport.broadcast(torch.tensor([True, False, False, False]), torch.ones(4, 2))
    assert transport.dropped == 2, "seed 5 loses both first messages"
    quiet = torch.zeros(4, dtype=torch.bool)
    for _ in range(20):
        transport.broadcast(quiet, torch.zeros(4, 2))
    for neighbour in (1, 3):
        assert transport.view(neighbour, 0).tolist() == [1.0, 1.0]
    assert transport.counters.events == 1
    # the event's 2 messages, and one more for each that was lost
    assert transport.counters.messages == 2 + transport.dropped
    assert not bool(transport.stale.any())


@pytest.mark.parametrize("name", ["detsgrad", "choco-sgd"])
def test_resend_without_losses_changes_nothing(name):
    plain, plain_transport = _trajectory(ALGORITHMS[name](), lambda v: _lossy(v, 0.0))
    again, again_transport = _trajectory(ALGORITHMS[name](), lambda v: _resending(v, 0.0))
    assert torch.equal(plain, again)
    assert plain_transport.counters.bytes == again_transport.counters.bytes


def _tracker_sums(config, resend: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of the trackers, sum of the gradients) after each of 30 steps of BEER
    (``config``) at 30 % loss."""
    algorithm = Beer(config, GRAPH, CONTEXT)
    initial = torch.randn(GRAPH.agents, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(30, GRAPH.agents, P, generator=torch.Generator().manual_seed(1))
    transport = LossyTransport(
        GRAPH, algorithm.initial_sent(initial), 0.3, generator(0, "faults"), resend=resend
    )
    state, trackers = algorithm.init(initial), []
    for step in range(30):
        state = algorithm.step(state, grads[step].clone(), step, transport)
        trackers.append(state.tracker.sum(0))
    assert transport.dropped > 0
    return torch.stack(trackers), grads.sum(1)


@pytest.mark.parametrize("compress", ["none", "randk"])
def test_with_resend_the_trackers_keep_summing_to_the_gradients(compress):
    """Each edge is mixed as the difference of what its ends hold of each other, so lost
    messages do not move sum_i v_i off sum_i grad_i; without resend they do."""
    config = BeerConfig(a=0.1, gamma=0.5, compress=compress, fraction=0.5)
    trackers, gradients = _tracker_sums(config, resend=True)
    torch.testing.assert_close(trackers, gradients, rtol=0, atol=1e-4)
    trackers, gradients = _tracker_sums(config, resend=False)
    assert float((trackers - gradients).abs().max()) > 0.1


def test_with_resend_dsgd_keeps_the_network_average():
    """DSGD combine-then-adapt: sum_i x_i moves by -a sum_i g_i exactly, lost values or not."""
    dsgd = Dsgd(DsgdConfig(a=0.1, d2=0.0), GRAPH)
    initial = torch.randn(GRAPH.agents, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(STEPS, GRAPH.agents, P, generator=torch.Generator().manual_seed(1))
    final, transport = _trajectory(dsgd, lambda v: _resending(v, 0.3))
    expected = initial.sum(0) - 0.1 * grads.sum((0, 1))
    torch.testing.assert_close(final.sum(0), expected, rtol=0, atol=1e-4)
    lossy, _ = _trajectory(Dsgd(DsgdConfig(a=0.1, d2=0.0), GRAPH), lambda v: _lossy(v, 0.3))
    assert float((lossy.sum(0) - expected).abs().max()) > 0.1
    assert transport.dropped > 0


def _slot_product(transport: LossyTransport, operator: torch.Tensor, out: torch.Tensor) -> None:
    """The mix as one row per (receiver, sender) slot holding what the receiver holds
    (the agents' own slots included), summed in the order of W's rows."""
    agents = transport.graph.agents
    pairs = sorted(
        {(i, i) for i in range(agents)}
        | {(int(r), int(s)) for s, r in zip(transport.senders, transport.receivers, strict=True)}
    )
    held = torch.stack([transport.view(receiver, sender) for receiver, sender in pairs])
    dense = operator.to_dense()
    spread = torch.zeros(agents, len(pairs))
    for slot, (receiver, sender) in enumerate(pairs):
        spread[receiver, slot] = dense[receiver, sender]
    out.addmm_(as_sparse(spread), held)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_mix_reads_each_mailbox_where_it_differs_and_sums_in_w_s_order_bit_for_bit(seed):
    """Senders' own rows for synced edges, mailboxes for the others, read through one
    sparse product whose columns are sorted and distinct, equal the product of one row
    per slot: the same numbers in the same order."""
    stream = torch.Generator().manual_seed(seed)
    graph = GRAPH if seed == 0 else star(7) if seed == 1 else ring(5)
    values = torch.randn(graph.agents, P, generator=stream) * 10.0 ** torch.arange(P) / 1e20
    transport = LossyTransport(graph, values, 0.5, generator(seed, "faults"))
    operator = as_sparse(torch.rand(graph.agents, graph.agents, generator=stream))
    for _ in range(4):
        sending = torch.rand(graph.agents, generator=stream) < 0.7
        transport.broadcast(sending, torch.randn(graph.agents, P, generator=stream))
    assert 0 < int(transport.synced.sum()) < transport.synced.numel()
    mixed, expected = torch.zeros(graph.agents, P), torch.zeros(graph.agents, P)
    transport.mix(operator, mixed)
    _slot_product(transport, operator, expected)
    assert torch.equal(mixed, expected)
    spread = transport._spread_of(operator, None)
    torch.sparse_csr_tensor(  # the invariants the product relies on
        spread.crow,
        spread.columns(transport.synced),
        spread.weights,
        size=(graph.agents, transport.store.shape[0]),
        check_invariants=True,
    )


def test_a_checkpoint_s_mailboxes_give_a_new_transport_the_same_mix():
    stream = torch.Generator().manual_seed(5)
    values = torch.randn(GRAPH.agents, P, generator=stream)
    transport = _lossy(values, 0.4)
    for _ in range(3):
        transport.broadcast(torch.ones(GRAPH.agents, dtype=torch.bool), torch.randn_like(values))
    restored = _lossy(values, 0.4, seed=9)
    restored.load_state_dict(transport.state_dict())
    assert torch.equal(restored.synced, transport.synced)
    operator = as_sparse(torch.rand(GRAPH.agents, GRAPH.agents, generator=stream))
    left, right = torch.zeros_like(values), torch.zeros_like(values)
    transport.mix(operator, left)
    restored.mix(operator, right)
    assert torch.equal(left, right)
