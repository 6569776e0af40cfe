"""Image augmentation drawn from keys: a random crop of a zero-padded image and a
horizontal flip, as the CIFAR papers train (``data.augment = "crop-flip"``).

A sample's crop offset and flip are a pure function of (run seed, agent, draw, slot):
the agent that drew the batch, how many batches that agent had drawn before it (the
iteration of a decentralized or centralized step, a worker's own count on a
parameter server) and the sample's place in the batch. Nothing comes from a random
generator, so an agent's batches are augmented alike whether it is simulated alone,
among 100,000 others or on a rank of the distributed runtime, and a resumed run
augments as the uninterrupted one would. Every agent's batch is augmented at once,
as tensor operations over the agent axis.

With padding ``p``, sample ``x`` (channels, height, width) becomes ``out[c, r, s] =
x[c, r + i - p, s' + j - p]`` (zero outside the image), with offsets ``i, j`` in
``[0, 2p]`` and ``s' = s`` or, flipped, ``width - 1 - s``: torchvision's
``RandomCrop(size, padding=p)`` followed by ``RandomHorizontalFlip()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn import functional

from murmur.seeding import LOW32, derive_seed, mix32

AUGMENTATIONS = ("none", "crop-flip")
"""The values of ``data.augment``."""
_COLUMNS, _FLIPS = 0x243F6A88, 0x85A308D3
"""Constants that tell a sample's column and flip words from its row word."""


@dataclass(frozen=True)
class CropFlip:
    """Random crops of zero-padded images and horizontal flips, keyed (see the module)."""

    shape: tuple[int, int, int]
    """Each row's image: (channels, height, width); rows are flat (features,)."""
    padding: int
    """Zeros added on every side before the crop."""
    seed: int
    """The run's seed, from which the key of every draw derives."""

    def __post_init__(self) -> None:
        if self.padding < 0:
            raise ValueError(f"the crop padding must be at least 0, not {self.padding}")

    def draws(
        self, agents: Sequence[int] | torch.Tensor, draw: int, batch: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each sample's row offset, column offset (both in [0, 2p]) and flip (bool),
        shape (agents, batch), for draw ``draw`` of each of ``agents``."""
        key = derive_seed(self.seed, "augment") & LOW32
        agent = torch.as_tensor(agents, dtype=torch.int64).reshape(-1, 1) & LOW32
        slot = torch.arange(batch, dtype=torch.int64).reshape(1, -1)
        hashed = mix32(torch.tensor(key, dtype=torch.int64) ^ agent)
        hashed = mix32(hashed ^ (draw & LOW32))
        hashed = mix32(hashed ^ slot)
        span = 2 * self.padding + 1
        # Three 32-bit words per sample: offsets without a visible bias, an even flip.
        rows = hashed % span
        columns = mix32(hashed ^ _COLUMNS) % span
        flips = (mix32(hashed ^ _FLIPS) >> 31).bool()
        return rows, columns, flips

    def __call__(
        self, x: torch.Tensor, agents: Sequence[int] | torch.Tensor, draw: int
    ) -> torch.Tensor:
        """The (agents, batch, features) rows ``x`` augmented, a new tensor of the same
        shape; ``agents``: whose batches they are, ``draw``: which of their draws."""
        blocks, batch = x.shape[0], x.shape[1]
        channels, height, width = self.shape
        rows, columns, flips = (t.to(x.device) for t in self.draws(agents, draw, batch))
        images = x.reshape(blocks * batch, channels, height, width)
        p = self.padding
        padded = functional.pad(images, (p, p, p, p)) if p else images
        across = torch.arange(width, device=x.device)
        source_columns = torch.where(flips.reshape(-1, 1), width - 1 - across, across)
        source_columns = source_columns + columns.reshape(-1, 1)
        source_rows = rows.reshape(-1, 1) + torch.arange(height, device=x.device)
        sample = torch.arange(blocks * batch, device=x.device).reshape(-1, 1, 1)
        # Advanced indices on either side of the channel slice: (N, H, W, C).
        out = padded[sample, :, source_rows.unsqueeze(2), source_columns.unsqueeze(1)]
        return out.permute(0, 3, 1, 2).reshape(x.shape)
