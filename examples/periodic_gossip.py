"""Local decentralized SGD (Koloskova et al. 2020): average every `period` steps."""

from dataclasses import dataclass
from typing import NamedTuple

import torch

import murmur.extend as mm


@dataclass(frozen=True)
class PeriodicGossipConfig(mm.SgdConfig):
    name = "periodic-gossip"
    period: int = 2  # iterations from one averaging to the next
    b: mm.Step = "auto"  # consensus step of W = I - b L; "auto": from the graph's spectrum

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.period < 1:
            raise mm.UsageError(f"algorithm.period must be at least 1, not {self.period}")


class State(NamedTuple):
    x: torch.Tensor  # every agent's model, one row each


class PeriodicGossip(mm.Rule):
    def __init__(self, config: PeriodicGossipConfig, graph: mm.Graph, context: mm.BuildContext):
        self.b = mm.consensus_step(graph, config.b)
        self.mixing = mm.mixing_operator(graph, "laplacian", self.b)
        self.alpha, self.period = config.gradient_step(), config.period

    def chosen_steps(self) -> dict[str, float]:
        return {"b": self.b}

    def init(self, params: torch.Tensor) -> State:
        return State(params.clone())

    def params(self, state: State) -> torch.Tensor:
        return state.x

    def step(self, state: State, grads: torch.Tensor, iteration: int, transport: mm.Transport):
        state.x.add_(grads, alpha=-self.alpha(iteration))
        if (iteration + 1) % self.period == 0:
            transport.broadcast_all_overwriting(state.x)  # every agent sends its model
            mm.mix_replace(transport, mm.MixStep(self.mixing, state.x))  # x <- W x
        return state


mm.register_algorithm(PeriodicGossipConfig, PeriodicGossip, "average every `period` steps")
