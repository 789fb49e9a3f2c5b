"""Per-row sampling streams: a row's draws do not depend on which other rows share its batch."""

from __future__ import annotations

import pytest
import torch

from vlarl_cli.policies import noise
from vlarl_cli.policies.noise import RowGenerator


def test_rows_draw_from_their_own_streams() -> None:
    g = RowGenerator.from_seeds([11, 12, 13])
    x = noise.randn((3, 2, 5), g)
    for i, seed in enumerate([11, 12, 13]):
        assert torch.equal(x[i], torch.randn((2, 5), generator=torch.Generator().manual_seed(seed)))


def test_split_batches_continue_the_same_streams() -> None:
    whole = RowGenerator.from_seeds(range(4))
    a = [noise.randn((4, 3), whole), noise.randint(7, (4,), whole), noise.multinomial(torch.full((4, 2, 5), 0.2), whole)]
    split = RowGenerator.from_seeds(range(4))
    low, high = split.rows([0, 1]), split.rows([2, 3])
    b_low = [noise.randn((2, 3), low), noise.randint(7, (2,), low), noise.multinomial(torch.full((2, 2, 5), 0.2), low)]
    b_high = [noise.randn((2, 3), high), noise.randint(7, (2,), high),
              noise.multinomial(torch.full((2, 2, 5), 0.2), high)]
    for whole_draw, lo, hi in zip(a, b_low, b_high, strict=True):
        assert torch.equal(whole_draw, torch.cat([lo, hi]))
    assert not torch.equal(a[0][0], a[0][1])  # distinct seeds give distinct streams


def test_plain_generators_keep_the_batched_draw() -> None:
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(noise.randn((4, 2), g1), torch.randn(4, 2, generator=g2))
    assert noise.multinomial(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), None).tolist() == [1, 0]


def test_wrong_row_count_is_an_error() -> None:
    with pytest.raises(ValueError, match="cannot draw a batch of 3 rows"):
        noise.randn((3, 2), RowGenerator.from_seeds([1, 2]))
