"""The one-peer exponential topology in the distributed runtime: each step every rank
talks to its one peer of that step, giving the simulator's models and counts; gossip
over it reaches the exact average in log2 N steps; other varying graphs are refused
in one line."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import torch
from gloo import gloo_groups, run_rank_threads
from ranks import launch_beside_the_simulator

from murmur.algorithms.dsgd import Dsgd, DsgdConfig
from murmur.cli import main
from murmur.config import load_experiment
from murmur.distributed.failures import PeerFailure, PeerTimeout
from murmur.distributed.mailbox import Mailbox
from murmur.distributed.transport import DistributedTransport
from murmur.distributed.varying import OnePeerGraphs, one_peer_links
from murmur.distributed.wire import MESSAGE_TAG, Kind, encode
from murmur.registry import ALGORITHMS
from murmur.sim.transport import InMemoryTransport
from murmur.topology import exponential, one_peer_exponential
from murmur.training.plan import distributed_varying, plan

P = 6


def _ranks_step(graph, block, initial, grads, config, every=1, wired=None):
    """Every rank's (models, transport, models after each step) after stepping DSGD over
    the one-peer graphs on ``graph`` through gloo ranks held by threads of this process,
    connected along ``wired`` (default: the pairings' union, as the runtime has it)."""
    ranks = graph.agents // block
    groups = gloo_groups(ranks)
    finals: dict[int, tuple] = {}
    wired = wired if wired is not None else one_peer_links(graph)

    def rank_main(rank: int) -> None:
        transport = DistributedTransport(
            groups[rank], wired, rank, initial, timeout=10.0, block=block, varying=True
        )
        rows = slice(rank * block, (rank + 1) * block)
        algorithm = OnePeerGraphs(Dsgd(config, graph), transport, graph, every)
        state = algorithm.init(initial[rows])
        history = [algorithm.params(state).clone()]
        transport.start()
        for step in range(grads.shape[0]):
            state = algorithm.step(state, grads[step, rows].clone(), step, transport)
            history.append(algorithm.params(state).clone())
        transport.finish()
        finals[rank] = (algorithm.params(state), transport, history)

    run_rank_threads(ranks, rank_main)
    assert len(finals) == ranks, "a rank did not finish"
    return finals


@pytest.mark.parametrize(
    ("agents", "block", "weights", "every", "wired"),
    [
        (8, 1, "laplacian", 1, None),
        (6, 1, "metropolis", 2, None),
        (8, 2, "metropolis", 1, None),
        (8, 1, "laplacian", 1, exponential(8)),
    ],
    ids=["8-ranks", "6-ranks-every-2", "4-ranks-of-2", "8-ranks-wired-exponentially"],
)
def test_one_peer_over_gloo_gives_the_in_memory_models_and_counts(
    agents, block, weights, every, wired
):
    graph = exponential(agents)
    config = DsgdConfig(a=0.2, weights=weights)
    steps = 7
    initial = torch.randn(agents, P, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(steps, agents, P, generator=torch.Generator().manual_seed(1))
    reference = InMemoryTransport(graph, initial)
    dsgd = Dsgd(config, graph)
    state = dsgd.init(initial)
    for step in range(steps):
        reference.use_graph(one_peer_exponential(graph, step // every))
        state = dsgd.step(state, grads[step].clone(), step, reference)
    expected, counters = dsgd.params(state), reference.counters

    finals = _ranks_step(graph, block, initial, grads, config, every, wired)
    for rank, (x, transport, _) in finals.items():
        rows = slice(rank * block, (rank + 1) * block)
        assert torch.equal(x, expected[rows])
        assert torch.equal(transport.counters.events_per_agent, counters.events_per_agent[rows])
        assert torch.equal(transport.counters.messages_per_agent, counters.messages_per_agent[rows])
        assert torch.equal(transport.counters.bytes_per_agent, counters.bytes_per_agent[rows])
        assert transport.rejected == 0
        # a rank of one agent talks to its one peer a step (none for N = 6 at distance 4):
        # no NONE, only a STOP to each rank it is wired to at the end
        if block == 1:
            assert transport.control_messages == len(transport.neighbours)
            if agents == 8:
                assert len(transport.neighbours) == (5 if wired is not None else 3)


def test_one_peer_gossip_over_gloo_reaches_the_exact_average_in_log2_n_steps():
    """Eight ranks from distinct models, no gradient: each pairing averages (weight 1/2),
    so after steps 1, 2 and 3 (distances 1, 2, 4) every rank holds the network's average,
    and not before."""
    graph = exponential(8)
    initial = torch.randn(8, P, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    grads = torch.zeros(4, 8, P, dtype=torch.float64)
    finals = _ranks_step(graph, 1, initial, grads, DsgdConfig(a=0.1))
    average = initial.mean(dim=0, keepdim=True)
    for rank, (_, transport, history) in finals.items():
        for step in range(3):
            assert not torch.allclose(history[step], average), (rank, step)
        for step in (3, 4):
            torch.testing.assert_close(history[step], average, rtol=0, atol=1e-12)
        assert int(transport.counters.messages_per_agent[0]) == 4  # one peer a step
        assert transport.neighbours == sorted(rank ^ d for d in (1, 2, 4))  # a hypercube


def test_eight_ranks_on_the_one_peer_exponential_graph_give_the_simulators_numbers(tmp_path):
    settings = [
        "topology.agents=8",
        "topology.graph=exponential",
        "topology.varying=one_peer",
        "run.iterations=20",
        "run.eval_every=10",
        "data.dataset=digits",
        "data.partition=iid",
    ]
    summary, simulated = launch_beside_the_simulator(tmp_path, "dsgd", settings, 8)
    assert summary["topology"] == simulated.topology == "one_peer(exponential) every 1"
    assert summary["messages"] == simulated.messages == 20 * 8  # one peer each, each step
    assert summary["accuracy"]["per_agent"] == simulated.accuracy["per_agent"]
    for key in ("events", "events_per_agent", "bytes", "samples", "iterations"):
        assert summary[key] == getattr(simulated, key), key
    assert summary["messages_per_agent"] == [20] * 8
    assert sum(summary["control_messages_per_agent"]) == 8 * 3  # a STOP to each link


@pytest.mark.parametrize(
    ("algorithm", "settings"),
    [
        ("dsgd", ["topology.varying=matching"]),
        (
            "detsgrad",
            ["topology.agents=4", "topology.graph=exponential", "topology.varying=one_peer"],
        ),
        ("dsgd", ["topology.graph=exponential", "topology.varying=one_peer", "faults.drop=0.1"]),
    ],
    ids=["matching", "detsgrad-one-peer", "one-peer-with-drops"],
)
def test_the_distributed_runtime_refuses_other_varying_graphs_in_one_line(
    capsys, tmp_path, algorithm, settings
):
    flags = [item for setting in settings for item in ("--set", setting)]
    out = tmp_path / "run"
    code = main(["launch", "--nproc", "4", algorithm, *flags, "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "Traceback" not in stdout + err
    assert err.startswith("murmur: error: the distributed runtime does not inject faults (")
    assert err.endswith("runs topology.varying = one_peer, for dsgd, without faults)\n")
    assert not out.exists()


# ---- a mailbox whose neighbours skip broadcasts ------------------------------------------


def _message(group, kind, sender, step, fill=None):
    payload = torch.full((P,), fill) if fill is not None else None
    group.send([encode(kind, sender, step, payload)], 0, MESSAGE_TAG).wait(timedelta(seconds=5))


@pytest.fixture
def skipping():
    """Rank 0's skipping mailbox (neighbours 1 and 2, from -1 and -2) and all three groups."""
    groups = gloo_groups(3)
    mailbox = Mailbox(groups[0], 0, [1, 2], torch.tensor([[-1.0] * P, [-2.0] * P]), skipping=True)
    mailbox.start()
    return mailbox, groups


def test_a_skipping_mailbox_waits_only_for_the_steps_senders(skipping):
    mailbox, groups = skipping
    _message(groups[1], Kind.VALUE, 1, 1, 1.0)
    _message(groups[2], Kind.VALUE, 2, 2, 22.0)
    _message(groups[1], Kind.NONE, 1, 3)
    assert [row[0].item() for row in mailbox.values_at(1, 5.0, senders=[0])] == [1.0, -2.0]
    assert [row[0].item() for row in mailbox.values_at(2, 5.0, senders=[1])] == [1.0, 22.0]
    assert [row[0].item() for row in mailbox.values_at(3, 5.0, senders=[0])] == [1.0, 22.0]
    started = time.monotonic()
    with pytest.raises(PeerTimeout, match="rank 2 sent no step-4 message within 0.3 s"):
        mailbox.values_at(4, 0.3, senders=[1])
    assert time.monotonic() - started < 2.0
    _message(groups[1], Kind.STOP, 1, 5)  # 5 broadcasts, the last heard here number 3
    _message(groups[2], Kind.STOP, 2, 5)
    mailbox.wait_stopped(timeout=5.0)
    assert mailbox.rejected == 0


def test_a_neighbour_that_skips_a_step_it_was_due_to_send_is_named(skipping):
    mailbox, groups = skipping
    _message(groups[1], Kind.VALUE, 1, 1, 1.0)
    _message(groups[2], Kind.VALUE, 2, 4, 2.0)  # due at step 1 too
    with pytest.raises(PeerFailure, match="^rank 2 sent no step-1 message, though due to"):
        mailbox.values_at(1, 5.0, senders=[0, 1])
    _message(groups[1], Kind.STOP, 1, 1)
    _message(groups[2], Kind.STOP, 2, 4)
    mailbox.wait_stopped(timeout=5.0)


def test_a_skipping_mailbox_refuses_a_step_number_that_goes_back(skipping):
    mailbox, groups = skipping
    _message(groups[1], Kind.VALUE, 1, 3, 1.0)
    _message(groups[1], Kind.VALUE, 1, 3, 1.0)
    with pytest.raises(PeerFailure, match="rank 1: sent a malformed message .step 3 after step 3"):
        mailbox.values_at(4, 5.0, senders=[0])
    assert mailbox.rejected == 1
    _message(groups[2], Kind.STOP, 2, 0)


def test_the_plan_sends_one_peer_dsgd_over_gloo_and_names_what_the_ranks_vary():
    settings = [
        "topology.agents=8",
        "topology.graph=exponential",
        "topology.varying=one_peer",
        "data.partition=iid",
    ]
    ((_, config),) = load_experiment("dsgd", settings).runs
    checked = plan(config, "distributed", world=8)
    assert (checked.transport, checked.processes) == ("gloo", 8)
    assert distributed_varying(ALGORITHMS["dsgd"], config)
    assert not distributed_varying(ALGORITHMS["detsgrad"], config)
