"""Keyed crop-and-flip augmentation: torchvision's crop of a padded image and flip,
the same draws for an agent alone or among others, and offsets spread evenly."""

import pytest
import torch
from torch.nn import functional

from murmur.data.augment import CropFlip


def _reference(row: torch.Tensor, shape, padding: int, top: int, left: int, flip: bool):
    """One sample by the definition: pad with zeros, crop at (top, left), flip."""
    channels, height, width = shape
    padded = functional.pad(row.reshape(shape), (padding,) * 4)
    image = padded[:, top : top + height, left : left + width]
    return (image.flip(2) if flip else image).reshape(-1)


@pytest.mark.parametrize("shape, padding", [((3, 8, 6), 2), ((1, 5, 5), 4), ((2, 4, 4), 0)])
def test_each_sample_is_its_padded_crop_flipped_as_drawn(shape, padding):
    augment = CropFlip(shape, padding, seed=5)
    x = torch.randn(3, 4, shape[0] * shape[1] * shape[2])
    out = augment(x, [4, 7, 9], draw=11)
    rows, columns, flips = augment.draws([4, 7, 9], 11, 4)
    for agent in range(3):
        for slot in range(4):
            expected = _reference(
                x[agent, slot],
                shape,
                padding,
                int(rows[agent, slot]),
                int(columns[agent, slot]),
                bool(flips[agent, slot]),
            )
            assert torch.equal(out[agent, slot], expected)


def test_an_agent_draws_the_same_alone_as_among_others_and_anew_each_draw():
    augment = CropFlip((3, 8, 8), 4, seed=1)
    x = torch.randn(5, 6, 192)
    together = augment(x, [0, 1, 2, 3, 4], draw=3)
    assert torch.equal(augment(x[2:3], [2], draw=3), together[2:3])
    assert torch.equal(augment(x, [0, 1, 2, 3, 4], draw=3), together)
    assert not torch.equal(augment(x, [0, 1, 2, 3, 4], draw=4), together)
    assert not torch.equal(CropFlip((3, 8, 8), 4, seed=2)(x, [0, 1, 2, 3, 4], 3), together)


def test_offsets_cover_their_range_evenly_and_half_the_samples_flip():
    augment = CropFlip((3, 32, 32), 4, seed=0)
    rows, columns, flips = augment.draws(range(100), 7, 90)
    for offsets in (rows, columns):
        counts = torch.bincount(offsets.reshape(-1), minlength=9)
        assert counts.numel() == 9  # nothing outside [0, 2p]
        # 9,000 draws, 1,000 expected per offset: 4 standard deviations is about 120
        assert (counts - 1000).abs().max() < 130
    assert abs(flips.float().mean().item() - 0.5) < 0.03


def test_no_padding_and_no_flip_leaves_the_image_as_it_was():
    augment = CropFlip((1, 4, 4), 0, seed=0)
    x = torch.arange(2 * 3 * 16, dtype=torch.float32).reshape(2, 3, 16)
    out = augment(x, [0, 1], 0)
    _, _, flips = augment.draws([0, 1], 0, 3)
    assert torch.equal(out[~flips], x[~flips])
    assert torch.equal(out[flips], x[flips].reshape(-1, 1, 4, 4).flip(3).reshape(-1, 16))


def test_a_negative_padding_is_refused():
    with pytest.raises(ValueError, match="padding"):
        CropFlip((1, 4, 4), -1, seed=0)
