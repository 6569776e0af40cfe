"""How every message is counted: events, point-to-point messages and payload bytes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class MessageCounters:
    """Events, point-to-point messages and payload bytes, per agent and in total."""

    agents: int
    events_per_agent: torch.Tensor = field(init=False)
    messages_per_agent: torch.Tensor = field(init=False)
    bytes_per_agent: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.events_per_agent = torch.zeros(self.agents, dtype=torch.int64)
        self.messages_per_agent = torch.zeros(self.agents, dtype=torch.int64)
        self.bytes_per_agent = torch.zeros(self.agents, dtype=torch.int64)

    def record_event(self, agent: int, messages: int, message_bytes: int) -> None:
        """Agent ``agent`` sent ``messages`` point-to-point messages of ``message_bytes`` each."""
        self.events_per_agent[agent] += 1
        self.messages_per_agent[agent] += messages
        self.bytes_per_agent[agent] += messages * message_bytes

    @property
    def events(self) -> int:
        return int(self.events_per_agent.sum())

    @property
    def messages(self) -> int:
        return int(self.messages_per_agent.sum())

    @property
    def bytes(self) -> int:
        return int(self.bytes_per_agent.sum())
