"""The sections of a run's config: typed, validated, frozen dataclasses.

``murmur.config`` puts them together into a :class:`~murmur.config.Config` and
reads them from TOML presets and ``--set`` overrides; the algorithms' own
sections derive from :class:`AlgorithmConfig`. This module imports nothing of
murmur but its errors, so every layer may use it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import ClassVar, Literal

from murmur.errors import UsageError

MAX_THREADS = 1024
"""Most torch intra-op threads a run may ask for."""


@dataclass(frozen=True)
class RunConfig:
    """How long to train and how to measure it."""

    seed: int = 0
    """Seed of every random choice: data split, model init, batches, graphs."""
    iterations: int = 3000
    """Number of training iterations (one mini-batch per agent each)."""
    eval_every: int = 100
    """Evaluate every agent on the test set every this many iterations."""
    eval_agents: int = 0
    """How many agents of a decentralized mini-batch run in the simulator each evaluation
    measures on the test set, besides the average model: a fixed sample drawn from
    ``run.seed`` (the same agents at every evaluation), or every agent when this is at
    least ``topology.agents``. 0: every agent up to 1,000 agents, a sample of 1,000
    above. Records and ``summary.json`` list the sampled agents (``measured_agents``)."""
    threads: int = 1
    """torch intra-op threads; 1 is fastest for small per-agent models."""
    checkpoint_every: int = 0
    """Save the run's whole state to ``checkpoint.pt`` in its folder every this many
    iterations (layers for SSFN), so that ``murmur run --resume`` can continue it;
    0 saves none."""
    compile: bool | Literal["auto"] = "auto"
    """Step the simulator's synchronous SGD algorithms through one compiled pass over
    the stacked state (``torch.compile``; inductor builds C++ kernels with g++): true,
    false, or "auto", which compiles when agents x parameters x iterations reaches 1e10
    and a C++ compiler is at hand, but not for networks whose gradients go agent by agent
    (convolutions on the CPU, recurrent layers), where the gradient dwarfs the mixing.
    Runs with ``[faults]`` or a varying graph, and the distributed runtime, step eagerly.
    The compiled step checks itself: the first step of each shape is computed both ways
    and must agree to within float32 rounding, and nothing compiles where torch's kernels
    are pinned below the CPU's (``ATEN_CPU_CAPABILITY``); otherwise the run steps eagerly
    and says why in one line and in summary.json's ``compile_fallback``."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where the simulator computes: ``cuda`` puts the model, the data, every agent's
    parameters, the algorithm's state, the mailboxes and the message counters of its
    synchronous SGD runs on the GPU, and a step reads nothing back (the losses and
    counts are read at evaluations); only the batch indices and fault masks go up each
    step. A server run keeps its model, optimizer state and gradients in flight there
    too. Simulator SGD and server runs only."""
    seeds: tuple[int, ...] = ()
    """Run the experiment once per seed of this list (each run's ``run.seed``), and
    report the mean and spread across them; empty: one run of ``run.seed``."""
    portable: bool = False
    """Pin the CPU kernels (one instruction set, MKL's reproducible mode, one thread)
    before torch computes anything, so that a seed gives the same numbers on any
    x86-64 machine, at some cost in speed."""
    log: tuple[Literal["jsonl", "csv", "tensorboard"], ...] = ("jsonl",)
    """Where each evaluation's record goes besides the summary: ``metrics.jsonl``,
    ``metrics.csv``, TensorBoard event files (``pip install 'murmur[tensorboard]'``)."""
    last_k: int = 5
    """The summary's ``last_k`` accuracy is the mean of the last this many evaluations."""
    plugins: tuple[str, ...] = ()
    """Plugins the run imports before it builds anything: Python files (a path ending in
    ``.py``, relative to the current directory; a TOML file's top-level ``plugins`` list
    is relative to that file) or importable modules, each registering its algorithms
    through ``murmur.extend`` (docs/guides/your-own-method.md). Saved as absolute paths."""
    plugins_sha256: tuple[str, ...] = ()
    """The SHA-256 of each plugin's source, one per plugin, filled in when the run is
    planned: a run resumed from its folder refuses a plugin that changed since. Empty:
    any."""

    def __post_init__(self) -> None:
        require(self.seed >= 0, f"run.seed must be >= 0, not {self.seed}")
        require(len(set(self.plugins)) == len(self.plugins), "run.plugins must not repeat a plugin")
        require(
            all(_is_sha256(digest) for digest in self.plugins_sha256),
            "run.plugins_sha256 must be SHA-256 digests (64 lower-case hex characters)",
        )
        require(self.iterations >= 1, "run.iterations must be at least 1")
        require(self.eval_every >= 1, "run.eval_every must be at least 1")
        require(self.eval_agents >= 0, f"run.eval_agents must be >= 0, not {self.eval_agents}")
        require(
            1 <= self.threads <= MAX_THREADS,
            f"run.threads must be from 1 to {MAX_THREADS}, not {self.threads}",
        )
        require(self.last_k >= 1, f"run.last_k must be at least 1, not {self.last_k}")
        require(len(set(self.seeds)) == len(self.seeds), "run.seeds must not repeat a seed")
        require(all(seed >= 0 for seed in self.seeds), "run.seeds must be >= 0")
        require(
            "jsonl" in self.log, 'run.log must keep "jsonl" (murmur report and --resume read it)'
        )
        require(
            self.checkpoint_every >= 0,
            f"run.checkpoint_every must be >= 0 (0 = no checkpoints), not {self.checkpoint_every}",
        )


@dataclass(frozen=True)
class DataConfig:
    """Which data, and how it is split among the agents."""

    dataset: str = "mnist5k"
    """Dataset name (see ``murmur datasets``): ``file`` reads your own ``data.path``;
    ``arrays`` stands for a Dataset given from Python (``murmur.run(config, data=...)``),
    which a config alone cannot rebuild."""
    root: str = ""
    """Directory with the files of an on-disk dataset: the IDX files of mnist and
    fashion-mnist, the folder of CIFAR's python batches (or the one that holds it) for
    cifar10 and cifar100, LEAF's ``data/femnist/data`` or ``data/shakespeare/data``
    folder for femnist and shakespeare (docs/reference/datasets.md)."""
    partition: Literal["iid", "labels", "dirichlet", "natural"] = "iid"
    """How training samples are split: uniformly, k labels per agent, Dirichlet, or
    ``natural``: each writer's samples on one agent (femnist, shakespeare), several
    writers to an agent where there are more writers than agents, dealt by sample
    count."""
    labels_per_agent: int = 1
    """Classes held by each agent when ``partition = "labels"``."""
    dirichlet_alpha: float = 0.5
    """Concentration of the Dirichlet split; smaller is more skewed."""
    batch_size: int = 32
    """Mini-batch size per agent and iteration."""
    augment: Literal["none", "crop-flip"] = "none"
    """How training images are augmented: ``crop-flip``, a random crop of the image
    padded with ``crop_padding`` zeros on every side and a horizontal flip of half the
    samples, drawn per agent, step and sample from the run's seed (the same in the
    simulator and the distributed runtime), as the CIFAR papers train; for image data
    (28x28, 3x32x32 or 8x8 rows), with SGD-family and parameter-server algorithms.
    ``none``: the rows as they are."""
    crop_padding: int = 4
    """Zeros added on every side of an image before ``augment = "crop-flip"`` crops it
    back to its size (4 for 32x32 CIFAR images)."""
    allow_missing_classes: bool = False
    """Let ``partition = "labels"`` leave classes out of every agent (agents x
    labels_per_agent < classes), which caps the test accuracy; refused otherwise."""
    validation: float = 0.0
    """Share of the training set, in [0, 1), held out as a validation split before the
    rest is split among the agents: every evaluation then measures the agents on it too
    (``validation_accuracy``, ``validation_loss``), for choosing steps and iterations
    while the test set stays for reporting. Drawn per class (each class gives its share)
    from ``validation_seed``, so that it is the same rows whatever ``run.seed``; 0: no
    validation split, the whole training set is split among the agents."""
    validation_seed: int = 0
    """Seed of the rows ``validation`` holds out (not ``run.seed``: every seed of an
    experiment holds out the same rows)."""
    path: str = ""
    """``dataset = "file"``: an ``.npz`` of x_train, y_train, x_test, y_test, or a ``.csv``
    with a header row (features, as they are, and the ``label_column``)."""
    test_path: str = ""
    """``dataset = "file"``: a second ``.csv``, of the same columns, as the test split;
    empty: ``test_fraction`` of the rows of ``path`` are held out."""
    test_fraction: float = 0.2
    """Share of a ``.csv``'s rows held out as the test split when ``test_path`` is empty
    (the same rows whatever ``run.seed``)."""
    validation_path: str = ""
    """``dataset = "file"``: a file of the same kind as ``path``, as the validation split
    instead of ``validation``'s share of the training rows: a ``.csv`` of the same columns,
    or an ``.npz`` of x_validation and y_validation."""
    label_column: str = "label"
    """The ``.csv`` column of the class labels (integers 0..C-1) or regression targets."""
    task: Literal["classification", "regression"] = "classification"
    """What the file's labels are: class numbers, or real-valued regression targets."""
    standardize: bool = False
    """Z-score the file's features with the training split's mean and standard deviation;
    false uses them as they are."""
    sha256: str = ""
    """SHA-256 of the data: of ``path`` (followed by ``test_path``'s and then
    ``validation_path``'s bytes when set), or of the arrays given from Python. The plan
    fills it in; set, a different file is refused."""

    def __post_init__(self) -> None:
        require(self.batch_size >= 1, "data.batch_size must be at least 1")
        require(self.crop_padding >= 0, "data.crop_padding must be at least 0")
        require(self.labels_per_agent >= 1, "data.labels_per_agent must be at least 1")
        require(self.dirichlet_alpha > 0, "data.dirichlet_alpha must be positive")
        require(
            0 < self.test_fraction < 1,
            f"data.test_fraction must be between 0 and 1, not {self.test_fraction}",
        )
        require(
            0 <= self.validation < 1,
            f"data.validation must be from 0 (no validation split) to below 1, "
            f"not {self.validation}",
        )
        require(
            self.validation_seed >= 0,
            f"data.validation_seed must be >= 0, not {self.validation_seed}",
        )
        require(
            self.validation == 0 or self.validation_path == "",
            "data.validation and data.validation_path both give a validation split; "
            "set one of them",
        )
        require(
            self.sha256 == "" or _is_sha256(self.sha256),
            f"data.sha256 must be 64 lowercase hexadecimal digits (as sha256sum prints them) "
            f"or empty, not {self.sha256[:80]!r}",
        )


@dataclass(frozen=True)
class ModelConfig:
    """The network every agent trains a copy of."""

    NORMALIZED: ClassVar[tuple[str, ...]] = ("resnet20", "vgg11")
    """The networks ``norm`` and ``groups`` apply to."""

    name: Literal[
        "mlp",
        "linear",
        "cnn",
        "resnet20",
        "vgg11",
        "femnist-cnn",
        "char-lstm",
        "factory",
        "custom",
    ] = "mlp"
    """``mlp`` (ReLU hidden layers), ``linear`` (one affine layer), ``cnn`` (a LeNet-5:
    two convolutions with max-pooling, then 120 -> 84 -> classes; for the 28x28 images
    of mnist5k, mnist, fashion-mnist and femnist, the 3x32x32 ones of cifar10 and
    cifar100 and, with 3x3 kernels, the 8x8 ones of digits), ``resnet20`` (the CIFAR
    ResNet-20 of He et al.: three stages of three basic blocks of 16, 32 and 64
    channels, 1x1-convolution shortcuts where the shape changes, 272,474 parameters for
    10 classes; for any of those images), ``vgg11`` (VGG-11 with the CIFAR classifier:
    dropout, 512 -> 512 -> 512 -> classes; 9.75 M parameters; 3x32x32 images only),
    ``femnist-cnn`` (LEAF's FEMNIST CNN: two 5x5 convolutions of 32 and 64 channels with
    max-pooling, then 2048 -> classes; 6.6 M parameters on femnist), ``char-lstm``
    (LEAF's Shakespeare model: each row a sequence of character indices, embedded in 8
    dimensions, a 2-layer LSTM of 256 units, the last step's output to the classes,
    which are the characters; for shakespeare), ``factory``: the network a function of
    your own builds (``model.factory``), or ``custom``: the ``torch.nn.Module`` given
    to ``murmur.run(config, model=...)`` from Python, which a config alone cannot
    rebuild."""
    hidden: tuple[int, ...] = (100,)
    """Hidden layer widths of the MLP (the other models ignore it)."""
    norm: Literal["default", "group", "batch", "none"] = "default"
    """The normalization after each convolution of ``resnet20`` and ``vgg11``: ``group``
    (GroupNorm of ``model.groups`` groups), ``batch`` (BatchNorm, whose running
    statistics each agent keeps for itself and never sends; not for server and Hogwild
    runs) or ``none``. ``default``: each network as decentralized-learning papers train
    it (Lin et al. 2021): ``group`` for resnet20, ``none`` for vgg11."""
    groups: int = 2
    """The groups of each GroupNorm of ``norm = "group"`` (2, as in Lin et al. 2021); it
    must divide 16 for resnet20 and 64 for vgg11."""
    factory: str = ""
    """With ``name = "factory"``: the function that builds the network, as
    ``FILE.py:FUNCTION`` (a path relative to the current directory, or to the TOML file
    that names it) or ``MODULE:FUNCTION``. murmur calls ``FUNCTION(features, outputs,
    **options)`` with the data's input features and classes and trains the
    ``torch.nn.Module`` it returns; the file or module is one of the run's plugins
    (``run.plugins``), imported by every process and pinned by its SHA-256."""
    options: tuple[str, ...] = ()
    """The factory's keyword arguments, each ``key=value`` with a TOML value, e.g.
    ``["hidden=64", "p=0.2"]``."""

    def __post_init__(self) -> None:
        require(all(width >= 1 for width in self.hidden), "model.hidden widths must be >= 1")
        require(self.groups >= 1, f"model.groups must be at least 1, not {self.groups}")
        require(
            self.norm == "default" or self.name in self.NORMALIZED,
            f"model.norm is for model.name = resnet20 or vgg11, not {self.name}",
        )
        if self.name != "factory":
            require(
                not self.factory and not self.options,
                f"model.factory and model.options are for model.name = factory, not {self.name}",
            )
            return
        module, colon, function = self.factory.rpartition(":")
        require(
            bool(colon and module and function.isidentifier()),
            f"model.factory must be FILE.py:FUNCTION or MODULE:FUNCTION, not {self.factory!r}",
        )
        self.keywords()  # checks the options

    @property
    def normalization(self) -> Literal["group", "batch", "none"]:
        """``norm`` with ``default`` resolved for the network ``name``."""
        if self.norm != "default":
            return self.norm
        return "group" if self.name == "resnet20" else "none"

    def keywords(self) -> dict[str, object]:
        """``options`` as the keyword arguments of the factory."""
        keywords: dict[str, object] = {}
        for item in self.options:
            key, equals, text = item.partition("=")
            key = key.strip()
            require(
                bool(equals) and key.isidentifier() and key not in keywords,
                f"model.options entries must be key=value with distinct keys, not {item!r}",
            )
            try:
                keywords[key] = tomllib.loads(f"v = {text.strip()}")["v"]
            except tomllib.TOMLDecodeError:
                keywords[key] = text.strip()
        return keywords

    def factory_parts(self) -> tuple[str, str]:
        """``factory`` as (the file or module, the function's name)."""
        module, _, function = self.factory.rpartition(":")
        return module, function


@dataclass(frozen=True)
class TopologyConfig:
    """The communication graph between agents."""

    graph: str = "ring"
    """ring, circular, complete, star, torus, exponential (agent i linked to those 1, 2,
    4, ... places ahead and behind), erdos_renyi or edges."""
    agents: int = 10
    """Number of agents (nodes)."""
    degree: int = 2
    """Degree of a ``circular`` graph (even)."""
    probability: float = 0.3
    """Edge probability of an ``erdos_renyi`` graph."""
    expected_degree: float = 0.0
    """An ``erdos_renyi`` graph's mean degree d instead: when set (> 0), each pair is linked
    with probability d / (agents - 1), and ``probability`` is not read."""
    rows: int = 0
    """Rows of a ``torus``; 0 chooses the most square shape."""
    edges_file: str = ""
    """Edge list file (one ``i j`` pair per line) for ``graph = "edges"``."""
    varying: Literal["none", "resample", "matching", "edge", "one_peer"] = "none"
    """A time-varying graph: every ``every`` iterations the agents talk over a new graph,
    ``resample``: ``graph`` built again from a new seed (a new Erdos-Renyi graph; a fixed
    family gives itself again), ``matching``: a random maximal matching of ``graph``'s
    edges, ``edge``: one random edge of ``graph``, ``one_peer``: the one-peer exponential
    topology on ``graph = "exponential"`` (at graph t, agent i pairs with agent
    i XOR 2^(t mod ceil(log2 N))). dsgd and detsgrad only, in the simulator; the
    distributed runtime runs ``one_peer`` for dsgd, without faults."""
    every: int = 1
    """Iterations each graph of a time-varying topology lasts."""

    @property
    def edge_probability(self) -> float:
        """An ``erdos_renyi`` graph's edge probability: from ``expected_degree`` where set."""
        if self.expected_degree > 0:
            return self.expected_degree / (self.agents - 1)
        return self.probability

    def __post_init__(self) -> None:
        require(self.agents >= 1, f"topology.agents must be at least 1, not {self.agents}")
        require(self.rows >= 0, "topology.rows must be >= 0 (0 = automatic)")
        require(self.every >= 1, f"topology.every must be at least 1, not {self.every}")
        require(
            0 <= self.expected_degree <= max(self.agents - 1, 0),
            f"topology.expected_degree must be from 0 to agents - 1 = {self.agents - 1}, "
            f"not {self.expected_degree}",
        )
        require(
            self.varying != "one_peer" or self.graph == "exponential",
            'topology.varying = "one_peer" pairs agents along the exponential graph; '
            f'set topology.graph = "exponential" (not {self.graph!r})',
        )


@dataclass(frozen=True)
class TimingConfig:
    """The virtual clock of the simulator: how long computing and messages take.

    An agent's update takes ``flops / (flops_per_second * speed)`` virtual
    seconds, times a random factor of mean 1 when ``compute_noise`` is not
    ``constant``; a message takes ``latency + bytes / bandwidth``.
    """

    flops_per_second: float = 1e10
    """Floating-point operations per virtual second of an agent of speed 1 (a CPU core)."""
    compute_noise: Literal["constant", "exponential", "lognormal"] = "constant"
    """Distribution of the factor (mean 1) that scales each compute time."""
    noise_sigma: float = 0.5
    """Shape of the log-normal factor (sigma of its logarithm)."""
    speeds: tuple[float, ...] = ()
    """Speed of each agent (one value per agent); empty: all 1."""
    stragglers: int = 0
    """How many agents (the first ones: 0, 1, ...) are slowed down."""
    straggler_factor: float = 4.0
    """How many times slower a straggler is (at least 1)."""
    latency: float = 1e-3
    """Seconds from send to arrival of any message, before its bytes."""
    bandwidth: float = 1.25e8
    """Bytes per second of every link (1.25e8 is 1 Gbit/s)."""

    def __post_init__(self) -> None:
        # Bounds that keep every virtual time finite, however long the run.
        require(
            1.0 <= self.flops_per_second,
            f"timing.flops_per_second must be at least 1, not {self.flops_per_second}",
        )
        require(
            0 <= self.noise_sigma <= MAX_NOISE_SIGMA,
            f"timing.noise_sigma must be from 0 to {MAX_NOISE_SIGMA:g}, not {self.noise_sigma}",
        )
        require(
            all(MIN_SPEED <= speed <= 1 / MIN_SPEED for speed in self.speeds),
            f"timing.speeds must all be from {MIN_SPEED:g} to {1 / MIN_SPEED:g}",
        )
        require(self.stragglers >= 0, "timing.stragglers must be >= 0")
        require(
            1 <= self.straggler_factor <= 1 / MIN_SPEED,
            f"timing.straggler_factor must be from 1 to {1 / MIN_SPEED:g}, "
            f"not {self.straggler_factor}",
        )
        require(
            0 <= self.latency <= MAX_LATENCY,
            f"timing.latency must be from 0 to {MAX_LATENCY:g} seconds, not {self.latency}",
        )
        require(
            self.bandwidth >= 1.0,
            f"timing.bandwidth must be at least 1 byte per second, not {self.bandwidth}",
        )

    def check_units(self, units: int, what: str) -> None:
        """``speeds`` and ``stragglers`` against the run's ``units`` agents or workers."""
        if self.speeds and len(self.speeds) != units:
            raise UsageError(
                f"timing.speeds has {len(self.speeds)} values for {units} {what}; "
                "give one per agent or none"
            )
        if self.stragglers > units:
            raise UsageError(
                f"timing.stragglers is {self.stragglers} but there are only {units} {what}"
            )


@dataclass(frozen=True)
class FaultsConfig:
    """Faults the simulator injects, drawn from streams of the run's seed, so that
    the same seed replays the same faults.

    Only the simulator's synchronous SGD algorithms (dsgd, detsgrad,
    detsgrad-gt, choco-sgd, sparq-sgd, beer, motef; lead with crashes only;
    centralized, which sends nothing and never crashes) run under faults; every
    other algorithm and the distributed runtime refuse them. A link that is down,
    or that leads to a crashed agent, leaves the mixing: its weight W_ij moves to
    the diagonal W_ii (``murmur.sim.lossy``), where a lost message leaves the
    receiver its stale value.
    """

    drop: float = 0.0
    """Probability that a point-to-point message is lost, independently per message, in
    [0, 1); the receiver keeps the last value it had of the sender. Lost messages still
    count as sent (their bytes were spent) and are counted as ``dropped_messages``."""
    link_down: float = 0.0
    """Probability, in [0, 1), that a link that is up goes down in an iteration: each
    edge is a two-state Markov chain, every edge up at the start."""
    link_up: float = 0.5
    """Probability, in (0, 1], that a link that is down comes back in an iteration."""
    crashes: int | tuple[int, ...] = 0
    """Agents that crash: how many (drawn from the seed), or a list of their indices."""
    crash_at: int = 0
    """The iteration whose step the crashed agents are the first to miss."""
    rejoin_at: int = 0
    """The iteration whose step they take again (after ``crash_at``); 0: never."""
    rejoin_from: Literal["own", "neighbour"] = "own"
    """A rejoining agent restarts from the model it had when it crashed (``own``), or
    from a copy of the model of its live neighbour of lowest index (``neighbour``)."""
    resend: bool = False
    """Lost messages are acknowledged as lost within their round and sent again: a lost
    value goes again at the next iteration even without an event, a lost estimate
    difference goes with the next message to that neighbour (its codes counted again),
    so a loss delays what a receiver holds instead of leaving it wrong for good; each
    edge is mixed as the difference of what its two ends hold of each other, which keeps
    the network average and the trackers' sum."""

    def __post_init__(self) -> None:
        require(0 <= self.drop < 1, f"faults.drop must be in [0, 1), not {self.drop}")
        require(
            0 <= self.link_down < 1, f"faults.link_down must be in [0, 1), not {self.link_down}"
        )
        require(0 < self.link_up <= 1, f"faults.link_up must be in (0, 1], not {self.link_up}")
        if isinstance(self.crashes, int):
            require(self.crashes >= 0, f"faults.crashes must be >= 0, not {self.crashes}")
        else:
            require(
                all(agent >= 0 for agent in self.crashes),
                f"faults.crashes lists agent indices, which are >= 0, not {list(self.crashes)}",
            )
            require(
                len(set(self.crashes)) == len(self.crashes),
                f"faults.crashes lists an agent twice: {list(self.crashes)}",
            )
        require(self.crash_at >= 0, f"faults.crash_at must be >= 0, not {self.crash_at}")
        require(
            self.rejoin_at == 0 or self.rejoin_at > self.crash_at,
            f"faults.rejoin_at = {self.rejoin_at} must come after faults.crash_at = "
            f"{self.crash_at} (or be 0: never)",
        )

    @property
    def crash_count(self) -> int:
        """How many agents crash."""
        return self.crashes if isinstance(self.crashes, int) else len(self.crashes)

    @property
    def active(self) -> bool:
        """Whether any fault is injected."""
        return self.drop > 0 or self.link_down > 0 or self.crash_count > 0

    def describe(self) -> str:
        """The faults asked for, as their settings: ``faults.drop = 0.1, ...``."""
        settings = {"drop": self.drop, "link_down": self.link_down, "crashes": self.crash_count}
        return ", ".join(f"faults.{key} = {value:g}" for key, value in settings.items() if value)

    def check_agents(self, agents: int, what: str = "agents") -> None:
        """The crashed agents (or workers: ``what``) against the run's ``agents``: in
        range, one left alive."""
        if isinstance(self.crashes, tuple) and any(agent >= agents for agent in self.crashes):
            raise UsageError(
                f"faults.crashes lists {what[:-1]} {max(self.crashes)}, but the {what} are "
                f"0..{agents - 1}"
            )
        if self.crash_count >= agents:
            raise UsageError(
                f"faults.crashes = {self.crash_count} would crash all {agents} {what}; "
                "leave at least one running"
            )


@dataclass(frozen=True)
class CollapseConfig:
    """The rules that stop a run early once it has diverged or collapsed.

    They read each evaluation as the run makes it (docs/guides/collapse.md).
    ``non-finite`` (a loss that is no longer a number) and ``loss-blowup`` (the loss
    ``loss_factor`` times its first value) end a run as ``diverged``;
    ``consensus-growing`` (the agents' distance to their average keeps growing) too,
    for decentralized mini-batch runs without ``[faults]``; ``chance`` (the mean
    accuracy at chance level for ``patience`` evaluations) ends it as ``collapsed``.
    The last two judge only evaluations after the warm-up. Both runtimes apply them,
    but for asynchronous dSSFN in the distributed runtime, whose records reach rank 0
    only at its end: it keeps the non-finite check, which fails the run.
    """

    enabled: bool = True
    """Apply the rules; false lets every run train to its end (a loss that is no longer a
    number still fails it, as nothing can be learned after it)."""
    warmup: float = 0.2
    """Share of the run, in [0, 1), before the ``chance`` and ``consensus-growing`` rules
    judge an evaluation: iterations for mini-batch runs, layers for layer-wise ones."""
    patience: int = 3
    """Consecutive evaluations after the warm-up whose mean accuracy is at chance level
    before the ``chance`` rule stops the run as collapsed."""
    chance_margin: float = 0.02
    """How far above chance level, in [0, 1), an accuracy still counts as at chance:
    chance level is the share of the most common class in the split measured (the
    validation split where the records hold ``validation_accuracy``, else the test set;
    1/classes for a balanced one)."""
    loss_factor: float = 10.0
    """The ``loss-blowup`` rule stops a run whose loss (the training loss where the
    records hold one, else the test loss, mean over agents) is more than this many times
    the loss at its first evaluation; at least 1."""
    consensus_evaluations: int = 5
    """The ``consensus-growing`` rule's window: it compares the median consensus
    distance of the last this many evaluations with that of the this many nearest the
    middle of the run so far, from twice this many evaluations on."""
    consensus_growth: float = 3.0
    """The ``consensus-growing`` rule stops a decentralized run whose distance over its
    last evaluations is more than this many times the one around its middle (at least 1)
    and above ``consensus_floor``."""
    consensus_floor: float = 0.5
    """A consensus distance below which the ``consensus-growing`` rule never fires:
    agents that close are in consensus whatever the ratio."""

    def __post_init__(self) -> None:
        require(0 <= self.warmup < 1, f"collapse.warmup must be in [0, 1), not {self.warmup}")
        require(self.patience >= 1, f"collapse.patience must be at least 1, not {self.patience}")
        require(
            0 <= self.chance_margin < 1,
            f"collapse.chance_margin must be in [0, 1), not {self.chance_margin}",
        )
        require(
            self.loss_factor >= 1,
            f"collapse.loss_factor must be at least 1, not {self.loss_factor}",
        )
        require(
            self.consensus_evaluations >= 1,
            f"collapse.consensus_evaluations must be at least 1, not {self.consensus_evaluations}",
        )
        require(
            self.consensus_growth >= 1,
            f"collapse.consensus_growth must be at least 1, not {self.consensus_growth}",
        )
        require(
            self.consensus_floor >= 0,
            f"collapse.consensus_floor must be >= 0, not {self.consensus_floor}",
        )


MIN_SPEED = 1e-6
"""Slowest relative speed of an agent (and so the largest straggler factor is 1e6)."""
MAX_NOISE_SIGMA = 10.0
"""Largest sigma of the log-normal compute factor: beyond it almost every factor is 0."""
MAX_LATENCY = 1e6
"""Longest message latency in virtual seconds (11.6 days)."""


@dataclass(frozen=True)
class AlgorithmConfig:
    """Base of every algorithm's parameters; ``name`` picks the algorithm."""

    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        """Checks nothing; every algorithm's section chains its own checks to it."""

    def steps_per_exchange(self) -> int:
        """Iterations from one exchange with the neighbours to the next; 1: every one."""
        return 1

    def mixing_weights(self) -> str | None:
        """The mixing matrix the agents average with (``laplacian``, ``metropolis``,
        ``uniform``); None for an algorithm without one."""
        return None


Step = float | Literal["auto"]
"""A step size given as a number, or "auto": chosen from the graph's spectrum."""


def _is_sha256(text: str) -> bool:
    return len(text) == 64 and all(character in "0123456789abcdef" for character in text)


def require(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)
