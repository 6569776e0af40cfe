"""Settings that make a synchronous SGD run of any preset small enough for a test:
six agents on blobs with an 8-unit hidden layer, 60 iterations, evaluated every 20."""

SMALL_SGD = [
    "data.dataset=blobs",
    "model.hidden=[8]",
    "topology.agents=6",
    "data.batch_size=8",
    "run.iterations=60",
    "run.eval_every=20",
]

RUN_FILES = ["agents.pt", "config.toml", "metrics.jsonl", "model.pt", "summary.json"]
"""What the folder of a finished mini-batch run holds, sorted."""


def least_squares_error(algorithm: dict[str, object], iterations: int = 600):
    """The largest relative distance of an agent's parameters to the known optimum of
    the synthetic least-squares problem after ``iterations`` of ``algorithm`` (keys of
    ``[algorithm]``, name included) on five agents of a ring, i.i.d. split, batch 32,
    a = 0.05 decaying with eps = 0.01 unless ``algorithm`` says otherwise; and the run's
    result."""
    import torch

    from murmur.config import build_config
    from murmur.data.datasets import synthetic_optimum
    from murmur.experiment import run
    from murmur.training.setup import prepare

    config = build_config(
        {
            "run": {"iterations": iterations, "eval_every": iterations},
            "data": {"dataset": "synthetic", "partition": "iid", "batch_size": 32},
            "model": {"name": "linear"},
            "topology": {"graph": "ring", "agents": 5},
            "algorithm": {"a": 0.05, "eps": 0.01, **algorithm},
        }
    )
    result = run(config)
    weight, bias = synthetic_optimum(prepare(config).dataset)
    optimum = torch.cat([weight.reshape(-1), bias]).to(torch.float32)
    errors = torch.linalg.vector_norm(result.parameters - optimum, dim=1) / optimum.norm()
    return float(errors.max()), result


def fixed_gradient_steps(algorithm, agents: int, parameters: int, steps: int, kept):
    """Run ``algorithm`` on a ring of ``agents`` for ``steps`` steps of fixed random
    gradients from a common random initial model: ``kept(state)`` after each step (its
    tensors copied), the gradients, (steps, agents, parameters), and the transport."""
    import torch

    from murmur.sim.transport import InMemoryTransport
    from murmur.topology import ring

    initial = torch.randn(parameters, generator=torch.Generator().manual_seed(0))
    initial = initial.expand(agents, parameters)
    grads = torch.randn(steps, agents, parameters, generator=torch.Generator().manual_seed(1))
    transport = InMemoryTransport(ring(agents), algorithm.initial_sent(initial))
    state = algorithm.init(initial)
    states = []
    for step in range(steps):
        state = algorithm.step(state, grads[step].clone(), step, transport)
        states.append(tuple(tensor.clone() for tensor in kept(state)))
    return states, grads, transport
