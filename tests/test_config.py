"""Typed config: section defaults, TOML round trip, checked overrides, presets."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest
import tomli_w

from murmur.algorithms.centralized import CentralizedConfig
from murmur.algorithms.detsgrad import DetsgradConfig
from murmur.algorithms.dsgd import DsgdConfig
from murmur.config import (
    CollapseConfig,
    Config,
    DataConfig,
    FaultsConfig,
    ModelConfig,
    RunConfig,
    TopologyConfig,
    build_config,
    load_experiment,
    parse_override,
    preset_names,
    save_config,
)
from murmur.errors import UsageError
from murmur.registry import ALGORITHMS


def single(source: str, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The one config of a single-run preset or TOML file."""
    experiment = load_experiment(source, overrides)
    assert len(experiment.runs) == 1
    return experiment.runs[0][1]


def write_toml(path: Path, values: dict) -> Path:
    path.write_text(tomli_w.dumps(values))
    return path


# ---- defaults and building ----------------------------------------------------------------


def test_section_defaults():
    assert dataclasses.asdict(RunConfig()) == {
        "seed": 0,
        "iterations": 3000,
        "eval_every": 100,
        "eval_agents": 0,
        "threads": 1,
        "checkpoint_every": 0,
        "compile": "auto",
        "device": "cpu",
        "seeds": (),
        "portable": False,
        "log": ("jsonl",),
        "last_k": 5,
        "plugins": (),
        "plugins_sha256": (),
    }
    assert dataclasses.asdict(DataConfig()) == {
        "dataset": "mnist5k",
        "root": "",
        "partition": "iid",
        "labels_per_agent": 1,
        "dirichlet_alpha": 0.5,
        "batch_size": 32,
        "augment": "none",
        "crop_padding": 4,
        "allow_missing_classes": False,
        "validation": 0.0,
        "validation_seed": 0,
        "path": "",
        "test_path": "",
        "test_fraction": 0.2,
        "validation_path": "",
        "label_column": "label",
        "task": "classification",
        "standardize": False,
        "sha256": "",
    }
    assert dataclasses.asdict(ModelConfig()) == {
        "name": "mlp",
        "hidden": (100,),
        "norm": "default",
        "groups": 2,
        "factory": "",
        "options": (),
    }
    assert dataclasses.asdict(TopologyConfig()) == {
        "graph": "ring",
        "agents": 10,
        "degree": 2,
        "probability": 0.3,
        "expected_degree": 0.0,
        "rows": 0,
        "edges_file": "",
        "varying": "none",
        "every": 1,
    }
    assert dataclasses.asdict(FaultsConfig()) == {
        "drop": 0.0,
        "link_down": 0.0,
        "link_up": 0.5,
        "crashes": 0,
        "crash_at": 0,
        "rejoin_at": 0,
        "rejoin_from": "own",
        "resend": False,
    }
    assert not FaultsConfig().active and FaultsConfig(drop=0.1).active
    assert FaultsConfig(link_down=0.1).active and FaultsConfig(crashes=(3,)).active


OPTIMIZER_DEFAULTS = {
    "optimizer": "sgd",
    "beta1": 0.9,
    "beta2": 0.999,
    "adam_eps": 1e-8,
    "weight_decay": 0.0,
    "warmup": 0,
    "milestones": (),
    "decay": 0.1,
}
"""The local optimizer's and the step decay's keys, which every SGD algorithm has after
a, d2 and eps."""
OPTIMIZER_KEYS = list(OPTIMIZER_DEFAULTS)
COMPRESSION_DEFAULTS = {
    "sign_scale": "tensor",
    "rank": 1,
    "power_iterations": 1,
    "warm_start": True,
    "precision": "float32",
    "indices": "int32",
}
"""The compressors' keys after compress, fraction and levels."""


def test_algorithm_defaults():
    assert dataclasses.asdict(DetsgradConfig()) == {
        "a": 0.1,
        "b": "auto",
        "v0": 1.0,
        "d1": 0.1,
        "d2": 1.0,
        "eps": 1e-5,
        "trigger": "model",
        "compress": "none",
        "fraction": 0.01,
        "levels": 16,
        **COMPRESSION_DEFAULTS,
        **OPTIMIZER_DEFAULTS,
    }
    assert dataclasses.asdict(DsgdConfig()) == {
        "a": 0.1,
        "d2": 1.0,
        "eps": 1e-5,
        **OPTIMIZER_DEFAULTS,
        "weights": "laplacian",
        "b": "auto",
        "order": "cta",
    }
    assert dataclasses.asdict(CentralizedConfig()) == {
        "a": 0.1,
        "d2": 1.0,
        "eps": 1e-5,
        **OPTIMIZER_DEFAULTS,
    }


def test_build_config_with_only_an_algorithm_name_uses_every_default():
    config = build_config({"algorithm": {"name": "detsgrad"}})
    assert config == Config(algorithm=DetsgradConfig())


def test_build_config_from_a_nested_dict():
    config = build_config(
        {
            "run": {"seed": 4, "iterations": 50},
            "data": {"dataset": "vowel", "partition": "dirichlet", "dirichlet_alpha": 2},
            "model": {"hidden": [16, 8]},
            "topology": {"graph": "torus", "agents": 6, "rows": 2},
            "algorithm": {"name": "dsgd", "a": 1, "weights": "metropolis", "order": "atc"},
        }
    )
    assert config.run == RunConfig(seed=4, iterations=50)
    assert config.data == DataConfig(dataset="vowel", partition="dirichlet", dirichlet_alpha=2.0)
    assert config.model == ModelConfig(hidden=(16, 8))
    assert config.topology == TopologyConfig(graph="torus", agents=6, rows=2)
    assert config.algorithm == DsgdConfig(a=1.0, weights="metropolis", order="atc")
    assert isinstance(config.algorithm.a, float)
    assert isinstance(config.data.dirichlet_alpha, float)


def test_build_config_needs_an_algorithm_name():
    with pytest.raises(UsageError, match="no algorithm.name"):
        build_config({"run": {"seed": 1}})


def test_build_config_refuses_an_unknown_algorithm_with_the_valid_names():
    with pytest.raises(UsageError) as error:
        build_config({"algorithm": {"name": "gossip"}})
    message = str(error.value)
    assert "gossip" in message
    assert "valid names: " + ", ".join(sorted(ALGORITHMS)) in message


def test_build_config_refuses_an_unknown_section():
    with pytest.raises(UsageError, match="unknown config section 'training'"):
        build_config({"training": {}, "algorithm": {"name": "detsgrad"}})


def test_build_config_refuses_a_section_that_is_not_a_table():
    with pytest.raises(UsageError, match=r"\[run\] must be a table"):
        build_config({"run": 3, "algorithm": {"name": "detsgrad"}})


def test_build_config_names_an_array_of_tables_as_one():
    with pytest.raises(UsageError, match=r"\[\[run\]\] is an array of tables; write the section"):
        build_config({"run": [{"seed": 1}], "algorithm": {"name": "detsgrad"}})


def test_a_long_wrong_value_is_cut_in_the_message():
    with pytest.raises(UsageError) as error:
        build_config({"run": {"seed": "x" * 10_000}, "algorithm": {"name": "detsgrad"}})
    assert len(str(error.value)) < 200


@pytest.mark.parametrize("drop", [-0.1, 1.0, 1.5])
def test_faults_drop_must_be_a_probability_below_one(drop):
    with pytest.raises(UsageError, match=rf"^faults.drop must be in \[0, 1\), not {drop}$"):
        single("dsgd", [f"faults.drop={drop}"])


def test_faults_drop_is_read_from_an_override_and_saved_with_the_config():
    config = single("dsgd", ["faults.drop=0.25"])
    assert config.faults == FaultsConfig(drop=0.25)
    assert config.to_dict()["faults"]["drop"] == 0.25
    assert build_config(config.to_dict()) == config


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("faults.link_down=1.0", r"^faults.link_down must be in \[0, 1\), not 1.0$"),
        ("faults.link_down=-0.5", r"^faults.link_down must be in \[0, 1\), not -0.5$"),
        ("faults.link_up=0", r"^faults.link_up must be in \(0, 1\], not 0.0$"),
        ("faults.link_up=1.5", r"^faults.link_up must be in \(0, 1\], not 1.5$"),
        ("faults.crashes=-1", r"^faults.crashes must be >= 0, not -1$"),
        ("faults.crashes=[1, -2]", r"^faults.crashes lists agent indices, which are >= 0"),
        ("faults.crashes=[3, 3]", r"^faults.crashes lists an agent twice: \[3, 3\]$"),
        ("faults.crash_at=-4", r"^faults.crash_at must be >= 0, not -4$"),
        ("faults.rejoin_from=random", r"^faults.rejoin_from must be one of 'own', 'neighbour'"),
        ("topology.every=0", r"^topology.every must be at least 1, not 0$"),
        ("topology.varying=sometimes", r"^topology.varying must be one of 'none', 'resample'"),
    ],
)
def test_bad_fault_and_varying_settings_are_refused_in_one_line(setting, message):
    with pytest.raises(UsageError, match=message):
        single("dsgd", [setting])


def test_collapse_defaults_are_read_from_overrides_and_saved_with_the_config():
    assert dataclasses.asdict(CollapseConfig()) == {
        "enabled": True,
        "warmup": 0.2,
        "patience": 3,
        "chance_margin": 0.02,
        "loss_factor": 10.0,
        "consensus_evaluations": 5,
        "consensus_growth": 3.0,
        "consensus_floor": 0.5,
    }
    config = single("dsgd", ["collapse.enabled=false", "collapse.patience=5"])
    assert config.collapse == CollapseConfig(enabled=False, patience=5)
    assert config.to_dict()["collapse"]["patience"] == 5
    assert build_config(config.to_dict()) == config
    without = {key: value for key, value in config.to_dict().items() if key != "collapse"}
    assert build_config(without).collapse == CollapseConfig()  # older config.toml files


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("collapse.warmup=-0.1", r"^collapse.warmup must be in \[0, 1\), not -0.1$"),
        ("collapse.warmup=1.0", r"^collapse.warmup must be in \[0, 1\), not 1.0$"),
        ("collapse.patience=0", r"^collapse.patience must be at least 1, not 0$"),
        ("collapse.chance_margin=1", r"^collapse.chance_margin must be in \[0, 1\), not 1.0$"),
        ("collapse.loss_factor=0.99", r"^collapse.loss_factor must be at least 1, not 0.99$"),
        (
            "collapse.consensus_evaluations=0",
            r"^collapse.consensus_evaluations must be at least 1, not 0$",
        ),
        ("collapse.consensus_growth=0", r"^collapse.consensus_growth must be at least 1, not 0.0$"),
        ("collapse.consensus_floor=-0.5", r"^collapse.consensus_floor must be >= 0, not -0.5$"),
        ("collapse.enabled=yes", r"^collapse.enabled must be true or false, not 'yes'$"),
    ],
)
def test_bad_collapse_settings_are_refused_in_one_line(setting, message):
    with pytest.raises(UsageError, match=message):
        single("dsgd", [setting])


def test_an_agent_must_rejoin_after_it_crashed():
    with pytest.raises(
        UsageError,
        match=r"^faults.rejoin_at = 100 must come after faults.crash_at = 100 \(or be 0: never\)$",
    ):
        single("dsgd", ["faults.crashes=2", "faults.crash_at=100", "faults.rejoin_at=100"])


def test_crashed_agents_are_read_as_a_number_or_a_list_and_saved_with_the_config():
    listed = single("dsgd", ["faults.crashes=[4, 1]", "faults.crash_at=10"])
    assert listed.faults.crashes == (4, 1) and listed.faults.crash_count == 2
    assert build_config(listed.to_dict()) == listed
    counted = single("dsgd", ["faults.crashes=3"])
    assert counted.faults.crashes == 3 and build_config(counted.to_dict()) == counted


@pytest.mark.parametrize("value", [3.5e38, -1e39, 1e308])
def test_floats_must_fit_in_float32(value):
    with pytest.raises(UsageError, match="must be a finite number within float32's range"):
        build_config({"algorithm": {"name": "detsgrad", "a": value}})


def test_to_dict_puts_the_algorithm_name_first():
    algorithm = single("detsgrad").to_dict()["algorithm"]
    assert list(algorithm)[:4] == ["name", "a", "d2", "eps"]
    assert list(algorithm)[4:] == [
        *OPTIMIZER_KEYS,
        "compress",
        "fraction",
        "levels",
        *COMPRESSION_DEFAULTS,
        "b",
        "d1",
        "v0",
        "trigger",
    ]
    assert algorithm["name"] == "detsgrad"


# ---- TOML round trip ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, overrides",
    [
        ("detsgrad", []),
        (
            "dsgd",
            [
                "run.seed=9",
                "data.partition=dirichlet",
                "data.dirichlet_alpha=0.25",
                "model.hidden=[8,4]",
                "topology.graph=erdos_renyi",
                "topology.probability=0.45",
                "algorithm.weights=metropolis",
                "algorithm.eps=3e-7",
            ],
        ),
        ("centralized", ["model.name=linear", "data.batch_size=7"]),
    ],
)
def test_saved_config_loads_back_equal(tmp_path, source, overrides):
    config = single(source, overrides)
    path = tmp_path / "config.toml"
    save_config(config, path)
    assert tomllib.loads(path.read_text()) == config.to_dict()
    assert single(str(path)) == config


def test_replace_returns_a_changed_copy():
    config = single("detsgrad")
    changed = config.replace(**{"run.seed": "3", "model.hidden": "[8, 4]"})
    assert changed.run.seed == 3
    assert changed.model.hidden == (8, 4)
    assert config.run.seed == 0
    assert config.model.hidden == (100,)
    assert changed.algorithm == config.algorithm


# ---- overrides ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "item, section, key, value",
    [
        ("run.seed=3", "run", "seed", 3),
        ("algorithm.a=0.05", "algorithm", "a", 0.05),
        ("model.hidden=[8,4]", "model", "hidden", [8, 4]),
        ("data.dataset=vowel", "data", "dataset", "vowel"),
        ('data.dataset = "vowel"', "data", "dataset", "vowel"),
        ("data.root=/tmp/a=b", "data", "root", "/tmp/a=b"),
        ("run.seed=true", "run", "seed", True),
    ],
)
def test_parse_override_reads_values_as_toml(item, section, key, value):
    parsed = parse_override(item)
    assert parsed == (section, key, value)
    assert type(parsed[2]) is type(value)


def test_overrides_are_typed():
    config = single(
        "detsgrad",
        ["run.seed=3", "algorithm.a=0.05", "model.hidden=[8,4]", "data.dataset=vowel"],
    )
    assert config.run.seed == 3 and type(config.run.seed) is int
    assert config.algorithm.a == 0.05
    assert config.model.hidden == (8, 4)
    assert config.data.dataset == "vowel"


def test_an_int_is_accepted_for_a_float_field():
    config = single("detsgrad", ["algorithm.a=1"])
    assert config.algorithm.a == 1.0
    assert type(config.algorithm.a) is float


@pytest.mark.parametrize(
    "item, message",
    [
        ("run.seed=abc", "run.seed must be an integer, not 'abc'"),
        ("run.seed=1.5", "run.seed must be an integer, not 1.5"),
        ("run.seed=true", "run.seed must be an integer, not True"),
        ("algorithm.a=false", "algorithm.a must be a number, not False"),
        ("algorithm.a=fast", "algorithm.a must be a number, not 'fast'"),
        ("data.dataset=3", "data.dataset must be a string, not 3"),
        ("model.hidden=8", "model.hidden must be a list"),
        ("model.hidden=[8, 2.5]", "model.hidden[1] must be an integer, not 2.5"),
        ("run.seed=-1", "run.seed must be >= 0, not -1"),
        ("run.seed=9223372036854775808", "run.seed must be an integer from -2**63 to 2**63 - 1"),
        ("topology.agents=-9223372036854775809", "topology.agents must be an integer from -2**63"),
        ("model.hidden=[8, 99999999999999999999]", "model.hidden[1] must be an integer from"),
        ("data.partition=random", "data.partition must be one of 'iid', 'labels', 'dirichlet'"),
        (
            "model.name=resnet",
            "model.name must be one of 'mlp', 'linear', 'cnn', 'resnet20', 'vgg11', "
            "'femnist-cnn', 'char-lstm', 'factory', 'custom'",
        ),
    ],
)
def test_wrongly_typed_overrides_are_refused(item, message):
    with pytest.raises(UsageError) as error:
        single("detsgrad", [item])
    assert message in str(error.value)


def test_literal_choices_accept_each_listed_value():
    for scheme in ("iid", "labels", "dirichlet"):
        assert single("detsgrad", [f"data.partition={scheme}"]).data.partition == scheme


def test_unknown_key_is_refused_with_the_valid_keys():
    with pytest.raises(UsageError) as error:
        single("detsgrad", ["run.sed=3"])
    message = str(error.value)
    assert "unknown key run.sed" in message
    assert "valid keys: seed, iterations, eval_every, eval_agents, threads" in message


def test_unknown_section_is_refused_with_the_valid_sections():
    with pytest.raises(UsageError) as error:
        single("detsgrad", ["training.seed=3"])
    message = str(error.value)
    assert "unknown config section 'training'" in message
    assert "valid sections: run, data, model, topology, timing, faults, collapse, algorithm" in (
        message
    )


@pytest.mark.parametrize("item", ["run.seed", "runseed=3", "=3", ".seed=3", "run.=3", ""])
def test_malformed_override_is_refused(item):
    with pytest.raises(UsageError, match="must look like section.key=value"):
        parse_override(item)
    with pytest.raises(UsageError, match="must look like section.key=value"):
        single("detsgrad", [item])


# ---- algorithm-specific keys --------------------------------------------------------------


def test_detsgrad_only_key_is_valid_for_detsgrad():
    assert single("detsgrad", ["algorithm.v0=2"]).algorithm.v0 == 2.0


def test_detsgrad_only_key_is_refused_for_dsgd_with_its_valid_keys():
    with pytest.raises(UsageError) as error:
        single("dsgd", ["algorithm.v0=2"])
    message = str(error.value)
    assert "unknown key algorithm.v0 (for algorithm 'dsgd')" in message
    assert f"valid keys: a, d2, eps, {', '.join(OPTIMIZER_KEYS)}, weights, b, order" in message


def test_switching_algorithm_keeps_shared_keys_and_drops_the_others():
    preset = single("detsgrad")
    switched = single("detsgrad", ["algorithm.b=0.3", "algorithm.name=dsgd", "algorithm.a=0.2"])
    assert isinstance(switched.algorithm, DsgdConfig)
    # b comes from the detsgrad config (0.3), not from the DSGD default ("auto").
    assert switched.algorithm.b == 0.3
    assert switched.algorithm.a == 0.2
    assert switched.algorithm.d2 == preset.algorithm.d2
    assert switched.algorithm.weights == "laplacian"
    assert list(switched.to_dict()["algorithm"]) == [
        "name",
        "a",
        "d2",
        "eps",
        *OPTIMIZER_KEYS,
        "weights",
        "b",
        "order",
    ]
    assert switched.data == preset.data
    assert switched.topology == preset.topology


def test_switching_algorithm_still_refuses_an_explicit_foreign_key():
    with pytest.raises(UsageError, match="unknown key algorithm.v0"):
        single("detsgrad", ["algorithm.name=dsgd", "algorithm.v0=2"])


# ---- presets ------------------------------------------------------------------------------


def test_shipped_presets():
    assert {"default", "detsgrad", "dsgd", "centralized"} <= set(preset_names())
    assert preset_names() == sorted(preset_names())


@pytest.mark.parametrize("name", preset_names())
def test_every_shipped_preset_loads_and_names_its_runs(name):
    """Each preset resolves to valid configs; a comparison's members differ in label."""
    experiment = load_experiment(name)
    assert experiment.description
    labels = [label for label, _ in experiment.runs]
    assert labels and len(set(labels)) == len(labels)


def test_talk_less_runs_each_method_on_the_same_data_and_graph():
    for name in ("talk-less", "talk-less-letter", "talk-less-bytes"):
        runs = load_experiment(name).runs
        assert len({(config.data, config.topology) for _, config in runs}) == 1, name
        assert "dsgd" in {label for label, _ in runs}, name


def test_every_talk_less_comparison_has_dsgd_on_its_own_and_the_gossip_weights():
    """A fair baseline: DSGD on the Laplacian weights and on the Metropolis weights
    that CHOCO-SGD, SPARQ-SGD and BEER mix with."""
    for name in ("talk-less", "talk-less-letter"):
        runs = dict(load_experiment(name).runs)
        assert {"dsgd", "dsgd-metropolis", "detsgrad", "detsgrad-gt", "beer"} <= set(runs)
        assert runs["dsgd"].algorithm.weights == "laplacian"
        assert runs["dsgd-metropolis"].algorithm.weights == "metropolis"


def test_detsgrad_preset_values():
    config = single("detsgrad")
    assert config.run == RunConfig(seed=0, iterations=3000, eval_every=100)
    assert config.data == DataConfig(dataset="mnist5k", partition="labels", labels_per_agent=1)
    assert config.topology == TopologyConfig(graph="ring", agents=10)
    assert config.algorithm == DetsgradConfig(a=0.2, b="auto", v0=5.0, d1=0.1, d2=1.0, eps=1e-5)


def test_extends_inherits_the_parent_sections():
    parent, child = single("detsgrad"), single("dsgd")
    assert child.run == parent.run
    assert child.data == parent.data
    assert child.model == parent.model
    assert child.topology == parent.topology
    assert child.algorithm == DsgdConfig(a=0.2, b="auto")
    assert load_experiment("dsgd").description.startswith("DSGD")


def test_extends_with_another_algorithm_drops_the_parents_algorithm_keys():
    config = single("centralized")
    assert config.algorithm == CentralizedConfig(a=0.2, d2=1.0, eps=1e-5)
    assert config.data == single("detsgrad").data


def test_a_file_can_extend_a_preset(tmp_path):
    path = write_toml(
        tmp_path / "mine.toml",
        {"extends": "detsgrad", "run": {"iterations": 50}, "algorithm": {"v0": 0.5}},
    )
    experiment = load_experiment(str(path))
    config = experiment.runs[0][1]
    assert experiment.name == "mine"
    assert config.run.iterations == 50
    assert config.run.eval_every == 100
    assert config.algorithm.v0 == 0.5
    assert config.algorithm.b == "auto"
    assert config.data == single("detsgrad").data


def test_default_preset_compares_four_runs():
    experiment = load_experiment("default")
    labels = [label for label, _ in experiment.runs]
    assert labels == ["detsgrad", "dsgd", "detsgrad-gt", "centralized"]
    assert [config.algorithm.name for _, config in experiment.runs] == labels
    for label, config in experiment.runs:
        assert config == single(label)
    assert experiment.description


def test_comparison_override_reaches_only_members_with_the_key():
    plain = dict(load_experiment("default").runs)
    with_v0 = dict(load_experiment("default", ["algorithm.v0=2"]).runs)
    assert with_v0["detsgrad"].algorithm.v0 == 2.0
    assert with_v0["dsgd"] == plain["dsgd"]
    assert with_v0["centralized"] == plain["centralized"]

    with_b = dict(load_experiment("default", ["algorithm.b=0.3"]).runs)
    assert with_b["detsgrad"].algorithm.b == 0.3
    assert with_b["dsgd"].algorithm.b == 0.3
    assert with_b["centralized"] == plain["centralized"]


def test_comparison_override_of_a_shared_section_reaches_every_member():
    runs = load_experiment("default", ["run.seed=7", "topology.agents=5"]).runs
    assert [config.run.seed for _, config in runs] == [7, 7, 7, 7]
    assert [config.topology.agents for _, config in runs] == [5, 5, 5, 5]


@pytest.mark.parametrize(
    "item, message",
    [
        ("algorithm.nosuch=1", "unknown key algorithm.nosuch"),
        ("run.nosuch=1", "unknown key run.nosuch"),
        ("algorithm.v0=-1", "algorithm.v0 must be >= 0"),
    ],
)
def test_comparison_override_that_no_member_accepts_is_refused(item, message):
    with pytest.raises(UsageError, match=message):
        load_experiment("default", [item])


def test_extends_loop_is_refused(tmp_path):
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    write_toml(first, {"extends": str(second), "run": {"seed": 1}})
    write_toml(second, {"extends": str(first), "run": {"seed": 2}})
    with pytest.raises(UsageError) as error:
        load_experiment(str(first))
    message = str(error.value)
    assert "loop" in message
    assert f"{first} -> {second} -> {first}" in message


def test_a_file_extending_itself_is_refused(tmp_path):
    path = tmp_path / "self.toml"
    write_toml(path, {"extends": str(path)})
    with pytest.raises(UsageError, match="loop"):
        load_experiment(str(path))


def test_extends_loop_through_another_spelling_of_the_same_file_is_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "self.toml"
    path.write_text('extends = "sub/../self.toml"\n')
    with pytest.raises(UsageError) as error:
        load_experiment(str(path))
    assert str(error.value) == (f"presets extend each other in a loop: {path} -> sub/../self.toml")


def test_an_extends_path_too_long_to_look_up_is_one_short_line(tmp_path):
    path = tmp_path / "long.toml"
    path.write_text(f'extends = "{"a" * 5000}.toml"\n')
    with pytest.raises(UsageError, match=r"is too long \(50\d\d characters\)") as error:
        load_experiment(str(path))
    assert len(str(error.value)) < 200


def test_toml_syntax_error_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[run\nseed = 1\n")
    with pytest.raises(UsageError) as error:
        load_experiment(str(path))
    assert f"{path} is not valid TOML" in str(error.value)


def test_missing_toml_file_is_refused(tmp_path):
    path = tmp_path / "absent.toml"
    with pytest.raises(UsageError, match=f"cannot read config file {path}"):
        load_experiment(str(path))


def test_unknown_preset_is_refused_with_the_preset_names():
    with pytest.raises(UsageError) as error:
        load_experiment("detsgard")
    message = str(error.value)
    assert "unknown preset 'detsgard'" in message
    assert ", ".join(preset_names()) in message


# ---- value validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "item, key",
    [
        ("run.iterations=0", "run.iterations"),
        ("run.eval_every=0", "run.eval_every"),
        ("run.threads=0", "run.threads"),
        ("topology.agents=0", "topology.agents"),
        ("topology.rows=-1", "topology.rows"),
        ("data.batch_size=0", "data.batch_size"),
        ("data.labels_per_agent=0", "data.labels_per_agent"),
        ("data.dirichlet_alpha=0", "data.dirichlet_alpha"),
        ("model.hidden=[8, 0]", "model.hidden"),
        ("algorithm.a=0", "algorithm.a"),
        ("algorithm.a=-0.1", "algorithm.a"),
        ("algorithm.b=0", "algorithm.b"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_key(item, key):
    with pytest.raises(UsageError) as error:
        single("detsgrad", [item])
    assert key in str(error.value)


@pytest.mark.parametrize("preset", ["dsgd", "centralized"])
def test_every_algorithm_refuses_a_non_positive_step(preset):
    with pytest.raises(UsageError, match="algorithm.a must be positive"):
        single(preset, ["algorithm.a=0"])


def test_non_finite_numbers_are_refused():
    with pytest.raises(UsageError, match="algorithm.a must be a finite number"):
        load_experiment("detsgrad", ["algorithm.a=nan"])


def test_top_level_scalar_keys_are_refused(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('extends = "detsgrad"\nseed = 5\n')
    with pytest.raises(UsageError, match="unknown config section 'seed'"):
        load_experiment(str(path))


def test_relative_extends_is_read_from_the_including_files_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.toml").write_text(
        '[algorithm]\nname = "dsgd"\n[run]\niterations = 7\n'
    )
    (tmp_path / "sub" / "child.toml").write_text('extends = "base.toml"\n[run]\nseed = 4\n')
    ((_, config),) = load_experiment(str(tmp_path / "sub" / "child.toml")).runs
    assert (config.run.iterations, config.run.seed, config.algorithm.name) == (7, 4, "dsgd")


def test_a_folder_a_device_or_a_non_utf8_file_is_refused_as_a_preset(tmp_path):
    """Each gets its own one-line reason, not 'unknown preset' or a decoding traceback."""
    binary = tmp_path / "latin.toml"
    binary.write_bytes(b'description = "caf\xe9"\n')
    cases = [
        (str(tmp_path), "is a folder, not a preset name or a .toml file"),
        ("/dev/null", "is not a regular file"),
        (str(binary), "is not UTF-8 text (byte 18)"),
    ]
    for source, message in cases:
        with pytest.raises(UsageError, match=re.escape(message)):
            load_experiment(source)
