"""The shape every algorithm has: pure functions over an explicit state.

An algorithm is built from its config (and the graph, for decentralized ones)
and offers three functions over a small state record whose tensors have the
agent axis first:

- ``init(params)``: the state, from the stacked initial parameters (agents, P);
- ``params(state)``: the parameters whose gradients are taken and evaluated;
- ``step(state, grads, iteration, transport)``: the next state, given the
  stacked mini-batch gradients at ``params(state)``. Communication goes through
  ``transport`` only (see ``murmur.runtime.transport``).

The state's tensors are large (agents x parameters), so ``step`` updates them in
place and may use ``grads`` as scratch space: the state passed in is consumed.
``grads`` belongs to the model and is overwritten by the next gradient call, so
the state must never keep a reference to it.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from murmur.runtime.transport import Transport


class Algorithm(Protocol):
    def init(self, params: torch.Tensor) -> Any: ...

    def params(self, state: Any) -> torch.Tensor: ...

    def step(
        self, state: Any, grads: torch.Tensor, iteration: int, transport: Transport
    ) -> Any: ...
