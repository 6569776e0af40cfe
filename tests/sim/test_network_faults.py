"""Down links, crashed agents and time-varying graphs in the simulator: replayed from
the seed, counted in the records, equal to the fault-free run where they change
nothing, and refused where they cannot run."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from small_runs import SMALL_SGD

from murmur.algorithms.detsgrad import Detsgrad, DetsgradConfig
from murmur.algorithms.dsgd import Dsgd, DsgdConfig
from murmur.cli import main
from murmur.config import load_experiment
from murmur.errors import UsageError
from murmur.experiment import run
from murmur.registry import ALGORITHMS
from murmur.reporting.run_schema import check_record, check_summary
from murmur.sections import FaultsConfig, TopologyConfig
from murmur.seeding import generator
from murmur.sim.faults import FaultyAlgorithm, NetworkSchedule
from murmur.sim.lossy import LossyTransport
from murmur.topology import (
    Graph,
    as_sparse,
    complete,
    exponential,
    metropolis_weights,
    ring,
)
from murmur.training.plan import plan
from murmur.training.runs import check_run

SMALL = SMALL_SGD
LINKS = ["faults.link_down=0.2", "faults.link_up=0.5"]
CRASHES = ["faults.crashes=2", "faults.crash_at=20", "faults.rejoin_at=40"]


def _config(algorithm: str, *settings: str):
    experiment = load_experiment(algorithm, [*SMALL, *settings])
    return experiment.runs[0][1]


def _records(folder) -> list[dict]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _same(one, other) -> bool:
    return (
        one.accuracy == other.accuracy
        and one.consensus_distance == other.consensus_distance
        and one.messages == other.messages
        and one.events == other.events
    )


# ---- equivalences: faults that change nothing change nothing, bit for bit ------------------


@pytest.mark.parametrize(
    ("algorithm", "settings"),
    [
        ("dsgd", []),
        ("detsgrad", ["algorithm.v0=0.5"]),
        ("detsgrad-gt", []),
        ("choco-sgd", []),
    ],
)
def test_a_crash_that_never_happens_equals_no_crash(algorithm, settings):
    plain = run(_config(algorithm, *settings))
    never = run(_config(algorithm, *settings, "faults.crashes=2", "faults.crash_at=60"))
    assert _same(plain, never)
    assert never.extra["crashed_agents"] == 0


def test_no_link_ever_down_equals_no_link_faults():
    plain = run(_config("detsgrad", "algorithm.v0=0.5"))
    zero = run(_config("detsgrad", "algorithm.v0=0.5", "faults.link_down=0"))
    assert _same(plain, zero) and "down_links" not in zero.extra


@pytest.mark.parametrize(
    ("algorithm", "settings"), [("dsgd", []), ("detsgrad", ["algorithm.v0=0.5"])]
)
def test_a_varying_graph_that_is_always_the_same_graph_equals_the_fixed_graph(algorithm, settings):
    """A ring built again from a new seed is the same ring."""
    fixed = run(_config(algorithm, *settings))
    varying = run(_config(algorithm, *settings, "topology.varying=resample"))
    assert _same(fixed, varying)


# ---- the transport: inactive edges leave the mix and carry nothing ------------------------

CHORDS = Graph(
    6, torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0], [0, 3], [1, 4]]), "chords"
)


def _transport(graph: Graph = CHORDS, values: torch.Tensor | None = None) -> LossyTransport:
    initial = values if values is not None else torch.zeros(graph.agents, 3)
    return LossyTransport(graph, initial, 0.0, generator(0, "faults"))


def _active(transport: LossyTransport, down: list[tuple[int, int]]) -> torch.Tensor:
    """Every directed edge active but those of the undirected links ``down``."""
    pairs = zip(transport.senders.tolist(), transport.receivers.tolist(), strict=True)
    return torch.tensor([tuple(sorted(pair)) not in down for pair in pairs])


def test_a_down_link_moves_its_weight_to_the_diagonal_and_keeps_the_average():
    values = torch.randn(6, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    transport = _transport(values=values)
    everyone = torch.ones(6, dtype=torch.bool)
    transport.enter(CHORDS, _active(transport, [(0, 1), (1, 4)]), everyone)
    weights = metropolis_weights(CHORDS)
    mixed = torch.zeros_like(values)
    transport.mix(as_sparse(weights, torch.float64), out=mixed)
    expected = weights.clone()
    for i, j in [(0, 1), (1, 4)]:
        for a, b in [(i, j), (j, i)]:
            expected[a, a] += expected[a, b]
            expected[a, b] = 0.0
    torch.testing.assert_close(mixed, expected @ values)
    torch.testing.assert_close(mixed.sum(0), values.sum(0))


def test_a_down_link_turns_the_laplacian_into_the_live_subgraphs():
    values = torch.randn(6, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    transport = _transport(values=values)
    transport.enter(CHORDS, _active(transport, [(2, 3)]), torch.ones(6, dtype=torch.bool))
    mixed = torch.zeros_like(values)
    transport.mix(as_sparse(CHORDS.laplacian(), torch.float64), out=mixed)
    live = Graph(6, CHORDS.edges[~(CHORDS.edges == torch.tensor([2, 3])).all(1)], "live")
    torch.testing.assert_close(mixed, live.laplacian() @ values)


def test_a_crashed_agent_sends_nothing_and_messages_count_over_active_edges_only():
    transport = _transport()
    alive = torch.tensor([True, True, False, True, True, True])
    active = _active(transport, [(1, 2), (2, 3), (0, 1)])
    transport.enter(CHORDS, active, alive)
    values = torch.ones(6, 3)
    transport.broadcast(torch.ones(6, dtype=torch.bool), values)
    # Active degrees: 0: {5, 3}; 1: {4}; 2: none (crashed); 3: {4, 0}; 4: {3, 5, 1}; 5: {4, 0}.
    assert transport.counters.messages_per_agent.tolist() == [2, 1, 0, 2, 3, 2]
    assert transport.counters.events_per_agent.tolist() == [1, 1, 0, 1, 1, 1]
    assert torch.equal(transport.last_sent[2], torch.zeros(3))
    assert torch.equal(transport.view(1, 0), torch.zeros(3))  # its link was down
    assert torch.equal(transport.view(3, 0), torch.ones(3))


# ---- the schedule: drawn from the seed ----------------------------------------------------


def _rounds(faults: FaultsConfig, topology: TopologyConfig, graph: Graph, seed: int, count: int):
    schedule = NetworkSchedule(faults, topology, graph, seed)
    return schedule, [schedule.round(iteration) for iteration in range(count)]


def test_the_same_seed_draws_the_same_links_crashes_and_graphs_and_another_seed_others():
    faults = FaultsConfig(link_down=0.2, crashes=2, crash_at=5, rejoin_at=9)
    topology = TopologyConfig(varying="matching", every=2)
    graph = complete(8)

    def draw(seed):
        schedule, rounds = _rounds(faults, topology, graph, seed, 30)
        return schedule.crashed, [(r.graph.edges.tolist(), r.active.tolist()) for r in rounds]

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)


def test_links_go_down_and_come_back_as_a_two_state_markov_chain():
    faults = FaultsConfig(link_down=0.1, link_up=0.4)
    schedule, rounds = _rounds(faults, TopologyConfig(), ring(50), 3, 400)
    down = torch.stack([~r.active[:50] for r in rounds]).to(torch.float64)
    assert schedule.down_link_iterations == int(down.sum())
    # Stationary share down: 0.1 / (0.1 + 0.4) = 0.2.
    assert abs(float(down.mean()) - 0.2) < 0.02
    # A down link stays down for 1 / 0.4 = 2.5 iterations on average.
    comes_back = ((down[:-1] == 1) & (down[1:] == 0)).sum() / (down[:-1] == 1).sum()
    assert abs(float(comes_back) - 0.4) < 0.05


def test_crashed_agents_are_drawn_from_the_seed_or_listed_and_miss_their_window():
    faults = FaultsConfig(crashes=(4, 1), crash_at=3, rejoin_at=6)
    schedule, rounds = _rounds(faults, TopologyConfig(), ring(6), 0, 8)
    assert schedule.crashed == [1, 4]
    down = [sorted((~r.alive).nonzero().squeeze(1).tolist()) for r in rounds]
    assert down == [[], [], [], [1, 4], [1, 4], [1, 4], [], []]
    assert [r.rejoined for r in rounds] == [[], [], [], [], [], [], [1, 4], []]
    edge_to_crashed = (ring(6).edges == 1).any(1)
    assert not bool(rounds[4].active[:6][edge_to_crashed].any())
    drawn = NetworkSchedule(FaultsConfig(crashes=3), TopologyConfig(), ring(10), 7).crashed
    assert drawn == NetworkSchedule(FaultsConfig(crashes=3), TopologyConfig(), ring(10), 7).crashed
    assert len(set(drawn)) == 3


@pytest.mark.parametrize(("varying", "largest"), [("matching", 4), ("edge", 1)])
def test_each_varying_graph_is_a_matching_or_one_edge_of_the_runs_graph(varying, largest):
    graph = complete(8)
    _, rounds = _rounds(FaultsConfig(), TopologyConfig(varying=varying, every=3), graph, 0, 12)
    for number, now in enumerate(rounds):
        edges = now.graph.edges
        assert edges.shape[0] == largest
        assert torch.unique(edges).numel() == 2 * largest  # no agent in two pairs
        assert now.graph == rounds[number - number % 3].graph
        assert int(now.active.sum()) == 2 * largest
    assert len({tuple(now.graph.edges.flatten().tolist()) for now in rounds}) > 1


# ---- algorithms under the rounds ----------------------------------------------------------


def _stepped(
    algorithm,
    faults: FaultsConfig,
    topology: TopologyConfig,
    graph: Graph,
    steps: int,
    still: bool = False,
):
    """``algorithm`` under the rounds of a schedule, on fixed gradients (zero ones when
    ``still``: then a step only mixes): the parameters before and after each step."""
    initial = torch.randn(graph.agents, 5, generator=torch.Generator().manual_seed(0))
    grads = torch.randn(steps, graph.agents, 5, generator=torch.Generator().manual_seed(1))
    if still:
        grads.zero_()
    schedule = NetworkSchedule(faults, topology, graph, 0)
    transport = LossyTransport(
        schedule.links, algorithm.initial_sent(initial), 0.0, generator(0, "faults")
    )
    faulty = FaultyAlgorithm(algorithm, schedule, transport, faults.rejoin_from)
    state = faulty.init(initial)
    history = [faulty.params(state).clone()]
    for step in range(steps):
        state = faulty.step(state, grads[step].clone(), step, transport)
        history.append(faulty.params(state).clone())
    return history, transport


@pytest.mark.parametrize(
    "make",
    [
        lambda graph: Dsgd(DsgdConfig(a=0.1), graph),
        lambda graph: Detsgrad(DetsgradConfig(a=0.1, v0=0.5), graph),
    ],
)
def test_a_crashed_agent_keeps_its_model_until_it_rejoins(make):
    faults = FaultsConfig(crashes=(2,), crash_at=3, rejoin_at=7)
    history, _ = _stepped(make(CHORDS), faults, TopologyConfig(), CHORDS, 10)
    frozen = history[3][2]
    for step in range(4, 8):
        assert torch.equal(history[step][2], frozen)
    assert not torch.equal(history[8][2], frozen)
    assert not torch.equal(history[5][1], history[4][1])


def test_an_agent_rejoining_from_a_neighbour_starts_from_that_neighbours_model():
    faults = FaultsConfig(crashes=(2,), crash_at=3, rejoin_at=7, rejoin_from="neighbour")
    algorithm = Dsgd(DsgdConfig(a=0.1), CHORDS)
    history, _ = _stepped(algorithm, faults, TopologyConfig(), CHORDS, 8, still=True)
    mixing = algorithm.mixing.value.to_dense().to(torch.float64)
    # At step 7 agent 2 first takes agent 1's model (its live neighbour of lowest index),
    # then mixes with its neighbours 1 and 3.
    before = history[7].to(torch.float64)
    before[2] = before[1]
    torch.testing.assert_close(history[8].to(torch.float64), mixing @ before)


def test_on_a_random_matching_dsgd_pairs_average_with_weight_one_half():
    topology = TopologyConfig(varying="matching")
    graph = complete(6)
    dsgd = Dsgd(DsgdConfig(a=0.1), graph)
    history, transport = _stepped(dsgd, FaultsConfig(), topology, graph, 1, still=True)
    pairs = transport.graph.edges.tolist()
    assert len(pairs) == 3
    for i, j in pairs:
        mean = (history[0][i] + history[0][j]) / 2
        torch.testing.assert_close(history[1][i], mean)
        torch.testing.assert_close(history[1][j], mean)
    assert transport.counters.messages == 6  # one message each way per pair


@pytest.mark.parametrize("agents", [2, 8, 64])
def test_one_peer_exponential_gossip_reaches_the_exact_average_in_log2_n_steps(agents):
    topology = TopologyConfig(graph="exponential", agents=agents, varying="one_peer")
    graph = exponential(agents)
    dsgd = Dsgd(DsgdConfig(a=0.1), graph)  # b = "auto": 1/2 on each pairing
    rounds = agents.bit_length() - 1
    history, transport = _stepped(dsgd, FaultsConfig(), topology, graph, rounds + 1, still=True)
    average = history[0].to(torch.float64).mean(dim=0)
    for step in range(rounds):
        assert not torch.allclose(history[step].to(torch.float64), average.expand(agents, -1))
    torch.testing.assert_close(
        history[rounds].to(torch.float64), average.expand(agents, -1), rtol=0, atol=1e-5
    )
    assert transport.counters.messages == agents * (rounds + 1)  # one peer each, each step


def test_one_peer_pairs_each_agent_with_the_one_at_distance_two_to_the_step():
    _, rounds = _rounds(
        FaultsConfig(),
        TopologyConfig(graph="exponential", agents=12, varying="one_peer"),
        exponential(12),
        0,
        5,
    )
    names = [r.graph.name for r in rounds]
    assert names == ["one_peer(1)", "one_peer(2)", "one_peer(4)", "one_peer(8)", "one_peer(1)"]
    pairs = rounds[3].graph.edges.tolist()
    assert pairs == [[0, 8], [1, 9], [2, 10], [3, 11]]  # agents 4 to 7 have no peer at 8


# ---- whole runs ---------------------------------------------------------------------------


def test_a_run_with_down_links_and_crashes_is_replayed_from_its_seed_and_counts_them(tmp_path):
    config = _config("detsgrad", "algorithm.v0=0.5", *LINKS, *CRASHES, "faults.crash_at=30")
    first = run(config, tmp_path / "first")
    again = run(config, tmp_path / "again")
    other = run(config.replace(**{"run.seed": "1"}), tmp_path / "other")
    assert _same(first, again)
    assert first.extra == {**again.extra, "virtual_seconds": first.extra["virtual_seconds"]}
    assert first.extra["down_link_iterations"] != other.extra["down_link_iterations"]
    summary = json.loads((tmp_path / "first" / "summary.json").read_text())
    check_summary("summary.json", summary)
    assert summary["down_link_iterations"] > summary["down_links"] >= 0
    assert summary["crashed_agents"] == 0  # back at iteration 40
    records = _records(tmp_path / "first")
    for number, record in enumerate(records):
        check_record(f"metrics.jsonl:{number + 1}", record)
    assert [record["crashed_agents"] for record in records] == [0, 0, 2, 0]
    live = records[2]
    assert live["live_accuracy_mean"] != live["accuracy_mean"] or live["accuracy_min"] == 1.0
    totals = [record["down_link_iterations"] for record in records]
    assert totals == sorted(totals) and totals[-1] == summary["down_link_iterations"]
    assert main(["report", str(tmp_path / "first")]) == 0


def test_down_links_carry_fewer_messages_than_up_ones():
    plain = run(_config("dsgd"))
    faulty = run(_config("dsgd", "faults.link_down=0.5", "faults.link_up=0.5"))
    assert 0.3 * plain.messages < faulty.messages < 0.7 * plain.messages


def test_dsgd_on_a_random_matching_sends_one_message_each_way_per_pair():
    result = run(_config("dsgd", "topology.graph=complete", "topology.varying=matching"))
    assert result.messages == 60 * 6
    assert result.topology == "matching(complete) every 1"


@pytest.mark.parametrize(
    "algorithm", ["dsgd", "detsgrad", "detsgrad-gt", "choco-sgd", "sparq-sgd", "centralized"]
)
def test_every_synchronous_algorithm_runs_with_down_links_and_crashes(algorithm):
    result = run(_config(algorithm, *LINKS, *CRASHES, "faults.rejoin_from=neighbour"))
    assert result.accuracy["mean"] is not None
    if algorithm == "centralized":  # one learner: it never crashes and sends nothing
        assert "crashed_agents" not in result.extra and result.messages == 0


@pytest.mark.parametrize("algorithm", ["detsgrad-gt", "choco-sgd", "sparq-sgd"])
def test_algorithms_with_weights_fixed_at_build_time_refuse_a_varying_graph(
    capsys, tmp_path, algorithm
):
    out = tmp_path / "run"
    code = main(["run", algorithm, "--set", "topology.varying=matching", "--out", str(out)])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"murmur: error: {algorithm} cannot run with topology.varying = ")
    assert err.endswith("the simulator varies the graph of detsgrad, dsgd\n")
    assert not out.exists()


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ("faults.link_down=0.1", "no model of lost messages or down links"),
        ("faults.crashes=1", "barrier waits for every worker"),
        ("topology.varying=edge", "its workers talk to one server, over no graph"),
    ],
)
def test_the_distributed_runtime_and_other_algorithms_refuse_the_new_faults(capsys, setting, why):
    code = main(["launch", "--nproc", "4", "dsgd", "--set", setting])
    _, err = capsys.readouterr()
    assert code == 2 and "the distributed runtime does not inject faults" in err
    with pytest.raises(UsageError, match="^sync-ps cannot run with ") as refused:
        check_run(load_experiment("sync-ps", [setting]).runs[0][1])
    assert why in str(refused.value)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["faults.crashes=[2, 6]"], r"^faults.crashes lists agent 6, but the agents are 0..5$"),
        (["faults.crashes=6"], r"^faults.crashes = 6 would crash all 6 agents; leave at least"),
    ],
)
def test_crashes_beyond_the_agents_are_refused_before_the_run(settings, message):
    with pytest.raises(UsageError, match=message):
        check_run(_config("dsgd", *settings))


def test_uniform_weights_on_a_varying_graph_are_refused_before_any_step():
    config = load_experiment(
        "dsgd", [*SMALL, "topology.varying=matching", "algorithm.weights=uniform"]
    ).runs[0][1]
    with pytest.raises(UsageError, match="uniform weights 1/\\(d\\+1\\) need a regular graph"):
        check_run(config)


@pytest.mark.parametrize(
    "settings",
    [
        ["topology.graph=complete", "topology.varying=matching"],
        ["topology.agents=8", "topology.graph=exponential", "topology.varying=one_peer"],
    ],
)
def test_dsgd_on_a_varying_graph_gives_through_the_lossless_transport_the_per_edge_numbers(
    settings, monkeypatch
):
    config = _config("dsgd", *settings)
    lossless = run(config)
    member = ALGORITHMS["dsgd"]
    per_edge = dataclasses.replace(
        member, capabilities=dataclasses.replace(member.capabilities, full_exchange=False)
    )
    monkeypatch.setitem(ALGORITHMS, "dsgd", per_edge)
    assert plan(config).transport == "per-edge"
    mailboxes = run(config)
    assert torch.equal(lossless.parameters, mailboxes.parameters)
    for plain, boxed in zip(lossless.records, mailboxes.records, strict=True):
        assert boxed.pop("dropped_messages") == 0  # what only the per-edge transport counts
        assert {**plain, "wall_seconds": 0} == {**boxed, "wall_seconds": 0}
    assert lossless.messages == mailboxes.messages > 0
