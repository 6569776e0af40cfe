"""Where a rank sits in the job and how the ranks form their process group.

Ranks are started by ``torchrun`` (one machine or many) or by ``murmur launch``
(forked on loopback, :mod:`murmur.distributed.local_ranks`); they read RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment
(:class:`RankEnvironment`). Started without torchrun, rank 0 hosts the rendezvous
store itself, listening on MASTER_ADDR only (loopback unless the user gives an
address); with a loopback MASTER_ADDR gloo is bound to the loopback interface too
(GLOO_SOCKET_IFNAME, unless set). Started by torchrun, its agent hosts the store, under
a prefix of its own for each restart.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from murmur.distributed.wording import first_line
from murmur.errors import UsageError

__all__ = ["RankEnvironment", "init_group", "loopback_interface"]


@dataclass(frozen=True)
class RankEnvironment:
    """Where this process sits in the job, from the torchrun environment variables."""

    rank: int
    world: int
    address: str
    port: int
    agent_store: bool
    """Started by torchrun, whose agent hosts the rendezvous store."""
    attempt: int = 0
    """How many times torchrun restarted the job's ranks (TORCHELASTIC_RESTART_COUNT)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> RankEnvironment:
        names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        missing = [name for name in names if not environ.get(name)]
        if missing:
            raise UsageError(
                f"--runtime distributed runs one rank of a torchrun job and needs "
                f"{', '.join(missing)} in the environment; start it with "
                "`murmur launch --nproc N PRESET` or with torchrun"
            )
        try:
            rank, world, port = (
                int(environ[name]) for name in ("RANK", "WORLD_SIZE", "MASTER_PORT")
            )
        except ValueError:
            raise UsageError("RANK, WORLD_SIZE and MASTER_PORT must be integers") from None
        if not 0 <= rank < world:
            raise UsageError(f"RANK must be in 0..WORLD_SIZE-1, got RANK={rank} WORLD_SIZE={world}")
        if not 0 < port < 65536:
            raise UsageError(f"MASTER_PORT must be a port number (1..65535), not {port}")
        agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        restarts = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        attempt = int(restarts) if restarts.isdigit() else 0
        return cls(rank, world, environ["MASTER_ADDR"], port, agent_store, attempt)


def init_group(env: RankEnvironment, timeout: float) -> None:
    """Join the process group, or fail with one line within about ``timeout`` seconds."""
    _bind_gloo_to_loopback(env.address)
    seconds = timedelta(seconds=timeout)
    try:
        with _cpp_logs_silenced():
            # Started by torchrun, its agent hosts the store; otherwise rank 0 does.
            store = _attempt_store(env, seconds) if env.agent_store else _store(env, timeout)
            dist.init_process_group(
                "gloo", store=store, rank=env.rank, world_size=env.world, timeout=seconds
            )
    except RuntimeError as error:
        raise UsageError(
            f"rank {env.rank}: the {env.world} ranks did not all join at "
            f"{env.address}:{env.port} within {timeout:g} s ({first_line(error)}); start "
            "every rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE"
        ) from None


@contextmanager
def _cpp_logs_silenced() -> Iterator[None]:
    """torch's C++ side logs each rendezvous retry straight to stderr (file descriptor 2);
    a failure is reported in one line instead. No other thread runs yet."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _attempt_store(env: RankEnvironment, timeout: timedelta) -> dist.Store:
    """The store of torchrun's agent, under a prefix of its own for each restart: the
    agent keeps one store across restarts, and the group of a restarted job must not
    read the addresses the failed attempt's ranks left in it."""
    agent = dist.TCPStore(env.address, env.port, env.world, False, timeout)
    return dist.PrefixStore(f"murmur/attempt-{env.attempt}", agent)


def _store(env: RankEnvironment, timeout: float) -> dist.Store:
    """Rank 0 hosts the rendezvous store on MASTER_ADDR only; the others wait for it."""
    where = f"{env.address}:{env.port}"
    if env.rank == 0:
        try:
            family = socket.getaddrinfo(env.address, env.port, type=socket.SOCK_STREAM)[0][0]
            server = socket.create_server((env.address, env.port), family=family)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise UsageError(
                    f"port {env.port} on {env.address} is in use; choose another "
                    "(MASTER_PORT, or murmur launch --port)"
                ) from None
            raise UsageError(f"cannot listen on {where}: {error.strerror or error}") from None
        return dist.TCPStore(
            env.address,
            env.port,
            env.world,
            True,
            timedelta(seconds=timeout),
            wait_for_workers=False,
            master_listen_fd=server.detach(),
        )
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((env.address, env.port), timeout=1.0).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise UsageError(
                    f"rank {env.rank}: rank 0 did not answer at {where} within {timeout:g} s; "
                    "start it, or check MASTER_ADDR and MASTER_PORT"
                ) from None
            time.sleep(0.1)
    remaining = max(deadline - time.monotonic(), 1.0)
    return dist.TCPStore(env.address, env.port, env.world, False, timedelta(seconds=remaining))


def _bind_gloo_to_loopback(address: str) -> None:
    """With a loopback MASTER_ADDR, keep gloo's sockets on loopback too (unless told otherwise)."""
    if "GLOO_SOCKET_IFNAME" in os.environ:
        return
    try:
        loopback = ipaddress.ip_address(socket.gethostbyname(address)).is_loopback
    except OSError:
        return
    interface = loopback_interface()
    if loopback and interface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = interface


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS)."""
    return next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)
