"""The table across seeds on known summaries: its cells, optional columns and folders."""

from __future__ import annotations

from summaries import summary_for, worker_summary
from test_report import markdown_rows, plain_rows

from murmur.reporting.report import format_table
from murmur.reporting.seed_table import comparison_markdown, format_results, format_seed_table
from murmur.reporting.statistics import spread


def seeds_of(name: str, means: list[float], **fields) -> list[dict]:
    return [
        summary_for(
            name,
            "dsgd",
            seed=seed,
            accuracy={"mean": mean, "min": mean - 0.1, "max": mean + 0.05, "per_agent": None},
            messages=200 + 10 * seed,
            run_dir=f"/runs/x/{name}/seed-{seed}",
            **fields,
        )
        for seed, mean in enumerate(means)
    ]


def test_cells_are_the_mean_and_sd_across_seeds():
    group = seeds_of("a", [0.8, 0.9, 0.85])
    row = markdown_rows(format_seed_table([group, seeds_of("b", [0.5])], markdown=True))
    result = spread([0.8, 0.9, 0.85])
    assert row[0]["seeds"] == "3"
    assert row[0]["final acc mean %"] == f"{100 * result.mean:.2f} ± {100 * result.sd:.2f}"
    assert row[0]["95 % CI"] == f"[{100 * result.low:.2f}, {min(100.0, 100 * result.high):.2f}]"
    assert row[0]["messages"] == "210 ± 10"
    assert row[0]["bytes"] == "2.00 ± 0.00 MB"  # the spread in the mean's unit
    assert (row[1]["seeds"], row[1]["final acc mean %"], row[1]["95 % CI"]) == ("1", "50.00", "-")
    plain = plain_rows(format_seed_table([group]))[0]
    assert plain["final acc mean %"] == result.text(scale=100)
    assert plain["run folder"] == "/runs/x/a"


def test_the_interval_stays_within_0_and_100_percent():
    row = markdown_rows(format_seed_table([seeds_of("a", [0.97, 1.0, 0.99])], markdown=True))[0]
    assert row["95 % CI"].endswith(", 100.00]")


def test_last_k_and_the_average_model_appear_where_summaries_have_them():
    plain = seeds_of("a", [0.8, 0.9])
    assert "last-k acc %" not in format_seed_table([plain])
    assert "last-k acc %" not in format_table(plain)
    last_k = seeds_of("a", [0.8, 0.9], accuracy_last_k={"mean": 0.7, "min": 0.6, "max": 0.8})
    for summary, model in zip(last_k, (0.81, 0.83), strict=True):
        summary["model_accuracy"] = model
    row = markdown_rows(format_seed_table([last_k], markdown=True))[0]
    assert row["last-k acc %"] == "70.00 ± 0.00"
    assert row["avg model acc %"] == "82.00 ± 1.41"
    per_seed = markdown_rows(format_table(last_k, markdown=True))
    assert [r["last-k acc %"] for r in per_seed] == ["70.00", "70.00"]
    assert [r["seed"] for r in per_seed] == ["0", "1"]  # one name, two seeds


def test_one_run_per_group_is_the_plain_table():
    summaries = [summary_for("a", "dsgd"), summary_for("b", "detsgrad")]
    assert format_results([[s] for s in summaries]) == format_table(summaries)
    assert "seed" not in format_table(summaries).splitlines()[0].split()


def test_messages_and_bytes_compare_each_seed_with_the_same_seeds_dsgd_run():
    """Seed 0's DSGD sent 200 messages, seed 1's 400: a run that sent 100 then 100 sent
    50 % and 25 % of them, bytes likewise, whatever the mean DSGD sent."""
    dsgd = [
        summary_for("dsgd", "dsgd", seed=s, messages=m, bytes=m * 10)
        for s, m in ((0, 200), (1, 400))
    ]
    less = [summary_for("less", "detsgrad", seed=s, messages=100, bytes=1000) for s in (0, 1)]
    row = markdown_rows(format_seed_table([dsgd, less], markdown=True))
    shares = spread([0.5, 0.25])
    for column in ("messages vs DSGD %", "bytes vs DSGD %"):
        assert row[1][column] == f"{100 * shares.mean:.2f} ± {100 * shares.sd:.2f}"
    assert "events vs DSGD %" not in row[1]  # events count differently per method
    assert row[0]["messages vs DSGD %"] == "100.00 ± 0.00"


def test_speedups_compare_each_seed_with_its_one_worker_run_and_count_who_reached():
    one = [worker_summary("w1", 1, its, its / 100, seed=s) for s, its in ((0, 1000), (1, 2000))]
    four = [
        worker_summary("w4", 4, 1000, 2.5, seed=0),
        worker_summary("w4", 4, None, None, seed=1),
    ]
    row = markdown_rows(format_seed_table([one, four], markdown=True))
    assert row[1]["reached"] == "1/2"
    assert row[1]["iteration speedup"] == "4.00"  # 4 * 1000 / 1000, seed 0 only
    assert row[1]["time speedup"] == "4.00"  # 10 / 2.5
    assert row[0]["its to target"] == "1500 ± 707"
    assert row[0]["staleness mean"] == "0.0 ± 0.0"


def test_the_tables_say_which_mixing_matrix_and_steps_each_run_used():
    choco = summary_for("choco", "choco-sgd", mixing="metropolis", steps={"gamma": 0.07504})
    dsgd = summary_for("dsgd", "dsgd", mixing="laplacian", steps={"b": 0.4564})
    rows = markdown_rows(format_table([choco, dsgd], markdown=True))
    assert [row["mixing"] for row in rows] == ["metropolis, gamma 0.075", "laplacian, b 0.456"]
    seeds = [summary_for("choco", "choco-sgd", seed=s, mixing="metropolis") for s in (0, 1)]
    assert markdown_rows(format_seed_table([seeds], markdown=True))[0]["mixing"] == "metropolis"
    assert "mixing" not in format_table([summary_for("c", "centralized")])


def test_a_varying_topology_shows_what_each_graph_mixes_with_not_the_fixed_graphs_step():
    from murmur.config import Config, apply_overrides, build_config
    from murmur.training.runs import mixing_per_graph

    def config(*overrides: str) -> Config:
        return build_config(apply_overrides({}, ["algorithm.name=dsgd", *overrides]))

    one_peer = config("topology.graph=exponential", "topology.varying=one_peer")
    assert mixing_per_graph(one_peer, {"b": 0.0473}) == "each one_peer graph's pairs average (1/2)"
    metropolis = config("topology.varying=matching", "algorithm.weights=metropolis")
    assert mixing_per_graph(metropolis, {}) == "each matching graph's pairs average (1/2)"
    assert mixing_per_graph(config("topology.varying=resample"), {"b": 0.3}) == (
        "b chosen for each graph"
    )
    assert (
        mixing_per_graph(config("topology.varying=matching", "algorithm.b=0.3"), {"b": 0.3}) is None
    )
    assert mixing_per_graph(config(), {"b": 0.456}) is None
    summary = summary_for(
        "one-peer",
        "dsgd",
        mixing="laplacian",
        steps={"b": 0.0473},
        mixing_per_graph="each one_peer graph's pairs average (1/2)",
    )
    (row,) = markdown_rows(format_table([summary], markdown=True))
    assert row["mixing"] == "laplacian, each one_peer graph's pairs average (1/2)"


def test_vs_dsgd_falls_back_to_each_seeds_full_exchange_and_the_note_names_the_row():
    """No DSGD run on the torus: each seed's run is over its own full exchange (seed 0's
    200 messages, seed 1's 400, as DSGD runs' counts would differ under faults)."""
    dsgd = [summary_for("dsgd", "dsgd", seed=s) for s in (0, 1)]
    torus = [
        summary_for(
            "torus",
            "detsgrad",
            topology="torus",
            seed=s,
            messages=100,
            full_exchange={"events": 100, "messages": m, "bytes": 4_000_000},
        )
        for s, m in ((0, 200), (1, 400))
    ]
    single = [summary_for("single", "centralized", agents=1, seed=s) for s in (0, 1)]
    groups = [dsgd, torus, single]
    rows = {row["name"]: row for row in markdown_rows(format_seed_table(groups, markdown=True))}
    shares = spread([0.5, 0.25])
    assert rows["torus"]["messages vs DSGD %"] == (
        f"{100 * shares.mean:.2f} ± {100 * shares.sd:.2f}"
    )
    assert rows["torus"]["bytes vs DSGD %"] == "50.00 ± 0.00"
    assert rows["dsgd"]["bytes vs DSGD %"] == "100.00 ± 0.00"
    for column in ("messages vs DSGD %", "bytes vs DSGD %"):
        assert rows["single"][column] == "-", column
    header = list(rows["torus"])
    assert header.index("messages vs DSGD %") == header.index("bytes") + 1
    text = comparison_markdown(groups)
    (note,) = [line for line in text.splitlines() if line.startswith("messages / bytes")]
    assert "the table has no DSGD run of the set-up of torus: its figures" in note


def test_comparison_without_any_baseline_has_no_vs_dsgd_columns_or_note():
    runs = [summary_for("event", "detsgrad", seed=s) for s in (0, 1)]
    text = comparison_markdown([runs])
    assert "vs DSGD" not in text
