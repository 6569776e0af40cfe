"""SSFN: a layer-wise network whose every layer is a convex problem (docs/methods/ssfn.md).

Chatterjee et al., "SSFN", arXiv 1905.07111. Samples are rows here: X is
(J, P), one-hot targets T are (J, Q) and a layer's output matrix O is (Q, n).

- Layer 0: O_0 = argmin ||T - Y_0 O^T||^2 + lambda ||O||^2 with Y_0 = X (ridge).
- Layer l >= 1: Y_l = ReLU([Y_{l-1} O_{l-1}^T V_Q^T, normc(Y_{l-1} R_l^T)]), with
  V_Q = [I; -I] and R_l uniform in (-1, 1), the same for every node (shared seed);
  O_l = argmin ||T - Y_l O^T||^2 subject to ||O||_F <= eps = alpha sqrt(2Q).

A layer's problem only needs the Gram matrix G = Y^T Y (n, n) and C = T^T Y
(Q, n). This module holds what every variant shares: the configs, the layer
features, the problems' proximal steps, ADMM for one node and the training
error; ``dssfn`` (synchronous, gossip) and ``arock`` (asynchronous) solve the
same problems across nodes, and ``runtime.layerwise`` drives the layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from murmur.algorithms.protocols import (
    Ball,
    LayerNetwork,
    LayerProblem,
    LayerSolution,
    Regularizer,
    Ridge,
)
from murmur.errors import UsageError
from murmur.sections import AlgorithmConfig
from murmur.seeding import generator


@dataclass(frozen=True)
class LayerwiseConfig(AlgorithmConfig):
    """What SSFN and its decentralized forms share. Defaults: the Vowel values."""

    lam: float = 1e2
    """lambda, the ridge weight of layer 0 (per dataset: the ssfn-DATASET presets)."""
    mu: float = 1e3
    """ADMM step: the penalty on disagreement is 1/mu (per dataset)."""
    mu0: float = 0.0
    """ADMM step of layer 0 (the ridge), which the decentralized forms solve by ADMM too;
    0: ``mu``. The ridge often converges far faster with a smaller step."""
    alpha: float = 2.0
    """Norm bound ||O||_F <= alpha * sqrt(2Q); alpha >= 1 keeps every layer lossless."""
    layers: int = 10
    """Layers after layer 0 (each adds 2Q + nodes ReLU units); with grow, the most."""
    nodes: int = 500
    """Random nodes per layer (the layer has 2Q more); with grow, the most."""
    admm_iterations: int = 100
    """The cap on ADMM iterations per layer (k_max); asynchronous: on updates per node
    and layer."""
    tolerance: float = 1e-4
    """ADMM stops once its relative primal and dual residuals are both at most this
    (asynchronous: every node's relative fixed-point residual); 0: always run to the cap."""

    def __post_init__(self) -> None:
        _positive(self.lam, "algorithm.lam (lambda)")
        _positive(self.mu, "algorithm.mu")
        if self.mu0 < 0:
            raise UsageError(f"algorithm.mu0 must be positive, or 0 for mu, not {self.mu0}")
        _positive(self.alpha, "algorithm.alpha")
        if self.layers < 0:
            raise UsageError(f"algorithm.layers must be >= 0, not {self.layers}")
        if self.nodes < 1:
            raise UsageError(f"algorithm.nodes must be at least 1, not {self.nodes}")
        if self.admm_iterations < 1:
            raise UsageError("algorithm.admm_iterations must be at least 1")
        if not 0 <= self.tolerance < 1:
            raise UsageError(f"algorithm.tolerance must be in [0, 1), not {self.tolerance}")


@dataclass(frozen=True)
class SsfnConfig(LayerwiseConfig):
    """Centralized SSFN: one learner, all the data; optionally sizes itself."""

    name = "ssfn"
    output: Literal["projected", "iterate"] = "projected"
    """What ADMM returns: its projection onto the norm ball (always within the bound), or
    its last iterate O, which may exceed it, as the authors' code does."""
    grow: bool = False
    """Choose the size: from zero random nodes (width 2Q), add ``node_step`` at a time
    while the training error improves, then layers, as the authors' code does."""
    node_step: int = 50
    """Random nodes added at a time when growing."""
    node_tolerance: float = 0.005
    """Keep adding nodes while the training NME improves by at least this fraction."""
    layer_tolerance: float = 0.1
    """Keep adding layers while the training NME improves by at least this fraction."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.node_step < 1:
            raise UsageError("algorithm.node_step must be at least 1")
        if self.node_tolerance < 0 or self.layer_tolerance < 0:
            raise UsageError("algorithm.node_tolerance and layer_tolerance must be >= 0")


def _positive(value: float, key: str) -> None:
    if not value > 0:
        raise UsageError(f"{key} must be positive, not {value}")


# ------------------------------------------------------------------ layer maps


def layer_step(config: LayerwiseConfig, regularizer: Regularizer) -> float:
    """The ADMM step for a layer: ``mu0`` for the ridge of layer 0 when set, else ``mu``."""
    if isinstance(regularizer, Ridge) and config.mu0 > 0:
        return config.mu0
    return config.mu


def norm_bound(config: LayerwiseConfig, classes: int) -> float:
    """eps = alpha * sqrt(2Q)."""
    return config.alpha * math.sqrt(2 * classes)


def random_weights(seed: int, layer: int, rows: int, columns: int) -> torch.Tensor:
    """R_l, uniform in (-1, 1), float64; the first k rows do not depend on ``rows``."""
    stream = generator(seed, "ssfn-weights", layer)
    return torch.rand(rows, columns, generator=stream, dtype=torch.float64).mul_(2).sub_(1)


def next_features(
    inputs: torch.Tensor, output: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Y_l (J, 2Q + rows of R) from Y_{l-1} (J, n), O_{l-1} (Q, n) and R_l."""
    estimate = inputs @ output.T
    random = inputs @ weights.T
    random.div_(torch.linalg.vector_norm(random, dim=1, keepdim=True).clamp_(min=1e-12))
    return torch.cat([estimate, -estimate, random], dim=1).clamp_(min=0)


def one_hot(labels: torch.Tensor, classes: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(labels, classes).to(torch.float64)


def nme_db(residual_square: float, target_square: float) -> float:
    """Normalized mean error 20 log10(||T - T^|| / ||T||), in dB."""
    ratio = math.sqrt(max(residual_square, 1e-300) / max(target_square, 1e-300))
    return 20.0 * math.log10(ratio)


# ------------------------------------------------------------- the two problems


def project_ball(matrices: torch.Tensor, radius: float) -> torch.Tensor:
    """Each (Q, n) matrix of a (M, Q, n) stack scaled back into the Frobenius ball, in place."""
    norms = torch.linalg.vector_norm(matrices.flatten(1), dim=1)
    scale = (radius / norms.clamp(min=1e-300)).clamp_(max=1.0)
    return matrices.mul_(scale.view(-1, 1, 1))


def consensus_prox(values: torch.Tensor, regularizer: Regularizer, mu: float, nodes: int):
    """argmin_Z g(Z) + sum_m (1/mu) ||V_m - Z||^2 given each node's estimate of mean(V).

    For the ball, projection; for the ridge, the mean shrunk by 1 / (1 + lambda mu / M).
    Works on a (M, Q, n) stack of per-node estimates, in place.
    """
    if isinstance(regularizer, Ball):
        return project_ball(values, regularizer.radius)
    return values.div_(1.0 + regularizer.lam * mu / nodes)


@dataclass(frozen=True)
class Admm:
    """ADMM's answer for one node: the output matrix, the iterations it took and its
    final relative residual."""

    output: torch.Tensor
    iterations: int
    residual: float


def relative_residual(
    output: torch.Tensor, split: torch.Tensor, previous: torch.Tensor
) -> torch.Tensor:
    """Per node of (M, Q, n) stacks, the squares ||O - Z||^2 (primal), ||Z - Z_prev||^2
    (dual, up to the step 1/mu) and the scales max(||O||^2, ||Z||^2) and ||Z||^2 they are
    relative to: (M, 4), so that sums over nodes give the network's residuals."""
    flat = output.flatten(1), split.flatten(1), previous.flatten(1)
    out_square = flat[0].square().sum(1)
    split_square = flat[1].square().sum(1)
    return torch.stack(
        [
            (flat[0] - flat[1]).square().sum(1),
            (flat[1] - flat[2]).square().sum(1),
            torch.maximum(out_square, split_square),
            split_square,
        ],
        dim=1,
    )


def residual_of(squares: torch.Tensor) -> float:
    """max(primal / scale, dual / scale) from the summed squares of
    :func:`relative_residual`."""
    primal, dual, scale, split = (float(value) for value in squares)
    return max((primal / max(scale, 1e-300)) ** 0.5, (dual / max(split, 1e-300)) ** 0.5)


def tolerance_met(residual: float, tolerance: float) -> bool:
    """Stop early: a positive tolerance is met (0 means: always run to the cap)."""
    return tolerance > 0 and residual <= tolerance


def converged(residual: float, tolerance: float) -> bool:
    """What a layer reports: it met its tolerance, or it had none (a fixed count)."""
    return tolerance == 0 or residual <= tolerance


def admm_single(
    gram: torch.Tensor,
    cross: torch.Tensor,
    radius: float,
    mu: float,
    iterations: int,
    iterate: bool = False,
    tolerance: float = 0.0,
) -> Admm:
    """ADMM of docs/methods/ssfn.md for min ||T - Y O^T||^2 s.t. ||O||_F <= radius.

    A = (G + I/mu)^-1, B = C; repeat: O = (B + (Q + Lam)/mu) A; Q = proj(O - Lam);
    Lam = Lam + Q - O, at most ``iterations`` times, stopping once the relative primal
    residual ||O - Q|| / max(||O||, ||Q||) and the relative change of Q are both at most
    ``tolerance``. Returns Q, which satisfies the constraint, or with ``iterate`` the
    last O, which may exceed it (what the SSFN authors' code returns).
    """
    n = gram.shape[0]
    system = gram + torch.eye(n, dtype=gram.dtype) / mu
    factor = torch.linalg.cholesky(system)
    inverse = torch.cholesky_inverse(factor)
    split = torch.zeros_like(cross)
    dual = torch.zeros_like(cross)
    residual = float("inf")
    done = 0
    while done < iterations:
        previous = split
        output = (cross + (split + dual) / mu) @ inverse
        split = project_ball((output - dual).unsqueeze(0), radius).squeeze(0)
        dual += split - output
        done += 1
        squares = relative_residual(output[None], split[None], previous[None])[0]
        residual = residual_of(squares)
        if tolerance_met(residual, tolerance):
            break
    return Admm(output if iterate else split, done, residual)


def ridge_solution(gram: torch.Tensor, cross: torch.Tensor, lam: float) -> torch.Tensor:
    """O = C (G + lambda I)^-1, the closed form of layer 0."""
    n = gram.shape[0]
    system = gram + lam * torch.eye(n, dtype=gram.dtype)
    return torch.linalg.solve(system, cross.T).T


def matmul_flops(rows: int, inner: int, columns: int) -> float:
    """Floating-point operations of a (rows, inner) @ (inner, columns) product."""
    return 2.0 * rows * inner * columns


class CentralSolver:
    """Centralized SSFN: one node, layer 0 in closed form, the others by ADMM."""

    def __init__(self, config: LayerwiseConfig) -> None:
        self.mu = config.mu
        self.cap = config.admm_iterations
        self.tolerance = config.tolerance
        self.iterate = isinstance(config, SsfnConfig) and config.output == "iterate"

    def solve(self, problem: LayerProblem, network: LayerNetwork) -> LayerSolution:
        regularizer = problem.regularizer
        outputs, steps, residuals = [], [], []
        for node, (gram, cross) in enumerate(zip(problem.grams, problem.crosses, strict=True)):
            n, classes = gram.shape[0], cross.shape[0]
            if isinstance(regularizer, Ridge):
                outputs.append(ridge_solution(gram, cross, regularizer.lam))
                steps.append(0)
                residuals.append(0.0)
                flops = n**3 / 3 + matmul_flops(classes, n, n)
            else:
                found = admm_single(
                    gram,
                    cross,
                    regularizer.radius,
                    self.mu,
                    self.cap,
                    iterate=self.iterate,
                    tolerance=self.tolerance,
                )
                outputs.append(found.output)
                steps.append(found.iterations)
                residuals.append(found.residual)
                flops = n**3 + found.iterations * matmul_flops(classes, n, n)
            network.work_alone(node, problem.setup_flops[node] + flops)
        return LayerSolution(
            outputs=torch.stack(outputs),
            steps=steps,
            rounds=[0] * len(steps),
            residual=residuals,
            converged=[converged(residual, self.tolerance) for residual in residuals],
        )
