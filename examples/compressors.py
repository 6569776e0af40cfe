"""Top-k in half precision: the k entries of largest magnitude, their values sent as
float16 and their indices as int32, 6 bytes an entry where murmur's topk sends 8.

    murmur run choco-sgd --plugin examples/compressors.py --set algorithm.compress=topk-half
"""

import math

import torch

import murmur.extend as mm


class HalfTopK:
    name = "topk-half"

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def kept(self, n: int) -> int:
        return min(n, max(1, math.ceil(self.fraction * n)))

    def compress(self, values: torch.Tensor, draws: mm.Draws) -> mm.Code:
        indices = values.abs().topk(self.kept(values.shape[1]), dim=1, sorted=False).indices
        return indices, values.gather(1, indices).half()

    def decode(self, code: mm.Code, n: int) -> torch.Tensor:
        indices, kept = code  # every holder adds exactly these values, sender included
        dense = torch.zeros(kept.shape[0], n, dtype=torch.float32, device=kept.device)
        return dense.scatter_(1, indices, kept.float())

    def nbytes(self, n: int, element_size: int) -> int:
        return self.kept(n) * (4 + 2)  # an int32 index and a float16 value per entry

    def pack(self, code: mm.Code, row: int) -> torch.Tensor:
        indices, kept = code
        parts = [indices[row].to(torch.int32), kept[row].contiguous()]
        return torch.cat([part.view(torch.uint8) for part in parts])

    def unpack(self, data: torch.Tensor, n: int, dtype: torch.dtype) -> mm.Code:
        k = self.kept(n)
        indices = data[: 4 * k].clone().view(torch.int32).to(torch.int64)
        return indices.reshape(1, k), data[4 * k : 6 * k].clone().view(torch.float16).reshape(1, k)

    def delta(self, n: int) -> float:
        """k / n, less float16's rounding (a relative error of at most 2^-11)."""
        return self.kept(n) / n * (1 - 2.0**-11) ** 2

    def typical_delta(self, n: int) -> float:
        return self.kept(n) / n


mm.register_compressor(
    "topk-half",
    lambda config, sizes, shapes: HalfTopK(config.fraction),
    "top-k with float16 values: 6 bytes an entry",
)
