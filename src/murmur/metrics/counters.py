"""How every message is counted: events, point-to-point messages and payload bytes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class MessageCounters:
    """Events, point-to-point messages and payload bytes, per agent and in total."""

    agents: int
    device: torch.device | str = "cpu"
    """Where the counts live: a simulator on a GPU counts there, and its counts are read
    back only when a record or checkpoint needs them."""
    events_per_agent: torch.Tensor = field(init=False)
    messages_per_agent: torch.Tensor = field(init=False)
    bytes_per_agent: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        agents, device = self.agents, self.device
        self.events_per_agent = torch.zeros(agents, dtype=torch.int64, device=device)
        self.messages_per_agent = torch.zeros(agents, dtype=torch.int64, device=device)
        self.bytes_per_agent = torch.zeros(agents, dtype=torch.int64, device=device)
        self._views: tuple[Any, Any, Any] | None = None

    def record_event(self, agent: int, messages: int, message_bytes: int) -> None:
        """Agent ``agent`` sent ``messages`` point-to-point messages of ``message_bytes`` each
        (counts on the CPU only: the event simulator's one-by-one pushes)."""
        if self._views is None:
            # NumPy views of the same memory: adding to one element of a tensor costs
            # tens of microseconds, to an array well under one (every push is counted).
            self._views = (
                self.events_per_agent.numpy(),
                self.messages_per_agent.numpy(),
                self.bytes_per_agent.numpy(),
            )
        events, sent, payload = self._views
        events[agent] += 1
        sent[agent] += messages
        payload[agent] += messages * message_bytes

    def record_events(
        self, events: torch.Tensor, message_bytes: torch.Tensor | int, degrees: torch.Tensor
    ) -> None:
        """Each agent sent ``events[i]`` events of ``message_bytes[i]`` bytes in all (or of
        ``message_bytes`` each), every one to its ``degrees[i]`` neighbours."""
        payload = (
            message_bytes if isinstance(message_bytes, torch.Tensor) else events * message_bytes
        )
        self.events_per_agent += events
        self.messages_per_agent += events * degrees
        self.bytes_per_agent += payload * degrees

    def record_messages(self, messages: torch.Tensor, payload: torch.Tensor) -> None:
        """Each agent sent ``messages[i]`` more point-to-point messages, of ``payload[i]``
        bytes in all, that are no event of its own (messages sent again)."""
        self.messages_per_agent += messages
        self.bytes_per_agent += payload

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The counts, for a checkpoint."""
        return {
            "events": self.events_per_agent,
            "messages": self.messages_per_agent,
            "bytes": self.bytes_per_agent,
        }

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Take the counts of :meth:`state_dict` (in place: the views stay valid)."""
        self.events_per_agent.copy_(state["events"])
        self.messages_per_agent.copy_(state["messages"])
        self.bytes_per_agent.copy_(state["bytes"])

    @property
    def events(self) -> int:
        return int(self.events_per_agent.sum())

    @property
    def messages(self) -> int:
        return int(self.messages_per_agent.sum())

    @property
    def bytes(self) -> int:
        return int(self.bytes_per_agent.sum())
