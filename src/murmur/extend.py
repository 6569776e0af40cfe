"""murmur's public extension API: what a plugin writes its own algorithm, compressor and
graph with.

Everything a decentralized rule needs is here, under one name: the protocols the
runtimes implement (:class:`Algorithm`, :class:`Transport`, :class:`Compressor`), the
base classes of an algorithm's ``[algorithm]`` section (:class:`AlgorithmConfig`,
:class:`SgdConfig`), the helpers murmur's own rules are written with (mixing through
the transport, the mixing matrices and consensus steps of a graph),
:func:`register_algorithm`, :func:`register_compressor` and :func:`register_graph`,
which murmur's own algorithms, compressors and graphs register through too, and
:func:`assert_runtimes_agree`, for a test that a rule gives the same numbers in both
runtimes. A rule registered here runs in the
simulator and in the distributed runtime, from ``murmur run``, ``--resume``,
``murmur launch`` and ``murmur tune``, with every message and byte counted as murmur
counts its own. The guide: docs/guides/your-own-method.md.

Stability: the names in ``__all__`` keep their meaning and signatures within a major
version of murmur. A change to one of them is announced in the release notes, and the
old form keeps working, with a ``DeprecationWarning``, for at least one minor release
before it goes. Anything imported from elsewhere in murmur may change at any release.
"""

from murmur.algorithms.compressors import Code, CompressionConfig, Compressor, register_compressor
from murmur.algorithms.draws import Draws
from murmur.algorithms.mixing import (
    mix_descend,
    mix_descend_norms,
    mix_replace,
    mix_replace_descend,
)
from murmur.algorithms.protocols import Algorithm, BuildContext, MixStep, Rule, Transport
from murmur.algorithms.schedules import SgdConfig, check_step
from murmur.errors import UsageError
from murmur.registry import (
    GAMMA,
    SMALL_STEP,
    STEP,
    Ability,
    Capabilities,
    RegistrationError,
    SearchRange,
    family_defaults,
    register_algorithm,
)
from murmur.runtimes_agree import assert_runtimes_agree
from murmur.sections import AlgorithmConfig, Step
from murmur.seeding import derive_seed
from murmur.topology import Graph, PerGraph, consensus_step, mixing_operator
from murmur.topology.graphs import GraphOptions, register_graph

__all__ = [
    "GAMMA",
    "SMALL_STEP",
    "STEP",
    "Ability",
    "Algorithm",
    "AlgorithmConfig",
    "BuildContext",
    "Capabilities",
    "Code",
    "CompressionConfig",
    "Compressor",
    "Draws",
    "Graph",
    "GraphOptions",
    "MixStep",
    "PerGraph",
    "RegistrationError",
    "Rule",
    "SearchRange",
    "SgdConfig",
    "Step",
    "Transport",
    "UsageError",
    "assert_runtimes_agree",
    "check_step",
    "consensus_step",
    "derive_seed",
    "family_defaults",
    "mix_descend",
    "mix_descend_norms",
    "mix_replace",
    "mix_replace_descend",
    "mixing_operator",
    "register_algorithm",
    "register_compressor",
    "register_graph",
]
