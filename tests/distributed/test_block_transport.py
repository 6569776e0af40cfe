"""The distributed transport holding a block of agents per rank, on gloo ranks held by
threads of this process: the in-memory transport's models and counts, and a malformed
block DELTA refused. The process-per-rank runs are in test_distributed_blocks.py."""

from __future__ import annotations

import pytest
import torch
from gloo import gloo_groups, run_rank_threads

from murmur.algorithms.choco import Choco, ChocoConfig
from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.algorithms.estimates import Segments, compressed_update, message_draws
from murmur.algorithms.protocols import BuildContext
from murmur.distributed.transport import DistributedTransport
from murmur.sim.transport import InMemoryTransport
from murmur.topology import Graph, ring, torus

P, STEPS = 10, 20
SEGMENTS = Segments((6, 4))
CONTEXT = BuildContext(seed=0, segments=SEGMENTS)


def detsgrad(graph: Graph) -> Detsgrad:
    return Detsgrad(DetsgradConfig(a=0.3, b=0.2, v0=2.5), graph)


def choco(graph: Graph) -> Choco:
    return Choco(ChocoConfig(a=0.1, compress="topk", fraction=0.3), graph, CONTEXT)


@pytest.mark.parametrize("build", [detsgrad, choco], ids=["detsgrad", "choco-topk"])
@pytest.mark.parametrize(
    ("graph", "block"), [(ring(6), 2), (torus(12, 3), 4)], ids=["ring-3x2", "torus-3x4"]
)
def test_blocks_over_gloo_give_the_in_memory_models_and_counts(build, graph, block):
    agents = graph.agents
    initial = torch.randn(agents, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(STEPS, agents, P, generator=torch.Generator().manual_seed(1))
    reference = InMemoryTransport(graph, initial)
    algorithm = build(graph)
    state = algorithm.init(initial)
    for step in range(STEPS):
        state = algorithm.step(state, grads[step].clone(), step, reference)
    expected = algorithm.params(state)

    ranks = agents // block
    groups = gloo_groups(ranks)
    finals: dict[int, tuple[torch.Tensor, DistributedTransport]] = {}

    def rank_main(rank: int) -> None:
        transport = DistributedTransport(
            groups[rank], graph, rank, initial, timeout=10.0, block=block
        )
        rows = slice(rank * block, (rank + 1) * block)
        transport.start()
        own = build(graph)
        rank_state = own.init(initial[rows])
        for step in range(STEPS):
            rank_state = own.step(rank_state, grads[step, rows].clone(), step, transport)
        transport.finish()
        finals[rank] = (own.params(rank_state), transport)

    run_rank_threads(ranks, rank_main)
    assert len(finals) == ranks, "a rank did not finish"
    counters = reference.counters
    for rank, (x, transport) in finals.items():
        rows = slice(rank * block, (rank + 1) * block)
        assert transport.agents == list(range(rank * block, (rank + 1) * block))
        assert torch.equal(x, expected[rows])
        assert torch.equal(transport.counters.events_per_agent, counters.events_per_agent[rows])
        assert torch.equal(transport.counters.messages_per_agent, counters.messages_per_agent[rows])
        assert torch.equal(transport.counters.bytes_per_agent, counters.bytes_per_agent[rows])
        assert transport.rejected == 0
    events = int(counters.events_per_agent.sum())
    if build is detsgrad:
        assert 0 < events < agents * STEPS, "some agents must stay silent some steps"


def block_delta(transport: DistributedTransport, rows: list[int]) -> tuple[torch.Tensor, ...]:
    """A well-formed DELTA of ``rows`` of a 2-agent block, and the difference it carries."""
    difference = torch.randn(2, P, generator=torch.Generator().manual_seed(2))
    sent = torch.ones(2, len(SEGMENTS), dtype=torch.bool)
    draws = message_draws(3, [0, 1], 0, torch.device("cpu"))
    update = compressed_update(transport_compressor(), difference, sent, SEGMENTS, draws)
    transport._codec = (update.compressor, update.segments)
    parts = [update.pack(row) for row in rows]
    counts = [*rows, *(part.numel() for part in parts), len(parts)]
    trailer = torch.tensor(counts, dtype=torch.int32).view(torch.float32)
    return torch.cat([*parts, trailer]), update.delta


def transport_compressor():
    return ChocoConfig(a=0.1, compress="topk", fraction=0.3).compressor()


@pytest.fixture
def rank0():
    """Rank 0 of two, holding agents 0 and 1 of a ring of 4 (rank 1 holds 2 and 3)."""
    groups = gloo_groups(2)
    initial = torch.zeros(4, P)
    return DistributedTransport(groups[0], ring(4), 0, initial, timeout=5.0, block=2)


def test_a_block_delta_adds_each_rows_difference_to_its_slot(rank0):
    words, delta = block_delta(rank0, [1])
    row = torch.zeros(2 * P)
    rank0._add_delta(row, words)
    assert torch.equal(row[:P], torch.zeros(P))
    assert torch.equal(row[P:], delta[1])


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda w: w[:-1], "DELTA of"),  # the count gone: garbage read as one
        (
            lambda w: torch.cat([w[:-1], torch.tensor([3], dtype=torch.int32).view(torch.float32)]),
            "a DELTA of 3 rows from a block of 2",
        ),
        (lambda w: torch.cat([torch.zeros(1), w]), "words for differences"),
    ],
    ids=["truncated", "too-many-rows", "extra-word"],
)
def test_a_malformed_block_delta_is_refused(rank0, damage, match):
    words, _ = block_delta(rank0, [0, 1])
    with pytest.raises(ValueError, match=match):
        rank0._add_delta(torch.zeros(2 * P), damage(words))


def test_block_delta_rows_out_of_order_are_refused(rank0):
    words, _ = block_delta(rank0, [0, 1])
    count = 2
    trailer = words[-1 - 2 * count :].view(torch.int32).clone()
    trailer[0], trailer[1] = 1, 0
    with pytest.raises(ValueError, match=r"rows \[1, 0\] of a block of 2"):
        rank0._add_delta(
            torch.zeros(2 * P), torch.cat([words[: -1 - 2 * count], trailer.view(torch.float32)])
        )
