"""Streaming demonstrations (datasets/stream.py, lerobot_index.py, frames.py, sampling.py, loader.py): the
streamed samples are the in-memory reader's, the order is a resumable rank-split permutation, and broken
datasets stop with the episode and frame named (or are skipped and counted when asked)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_lerobot import LENGTHS, write_openpi_images, write_v21, write_v30

from vlarl_cli import keys
from vlarl_cli.datasets import load_demonstrations
from vlarl_cli.datasets.loader import make_loader
from vlarl_cli.datasets.sampling import GlobalOrder, MicroBatches
from vlarl_cli.datasets.stream import BadFrame, FrameDataset, open_source
from vlarl_cli.errors import VlarlError
from vlarl_cli.training.demos import ChunkDataset

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("writer", [write_v21, write_v30, write_openpi_images], ids=["v2.1", "v3.0", "png"])
def test_streamed_samples_are_the_in_memory_samples(tmp_path, writer):
    root = writer(tmp_path / "ds")
    episodes, _ = load_demonstrations(root)
    memory = ChunkDataset(episodes, chunk=4)
    stream = FrameDataset([open_source(root)], chunk=4)
    assert len(stream) == len(memory) == sum(LENGTHS) and stream.num_episodes == 2
    for i in range(len(memory)):
        want_obs, want_chunk = memory[i]
        got = stream[i]
        assert not isinstance(got, BadFrame), got
        _, obs, chunk = got
        np.testing.assert_array_equal(chunk, want_chunk.numpy())
        assert obs[keys.TASK_DESCRIPTIONS] == want_obs[keys.TASK_DESCRIPTIONS]
        for name in (keys.STATES, keys.MAIN_IMAGES, keys.WRIST_IMAGES):
            np.testing.assert_array_equal(obs[name], want_obs[name].numpy(), err_msg=f"{i} {name}")


def _draws(order: GlobalOrder, steps: range) -> list[np.ndarray]:
    return [order.batch(s) for s in steps]


def test_every_sample_once_per_epoch_across_ranks_and_a_resume_continues_the_order():
    sizes, batch = [7, 5], 4  # 12 samples, epochs cross batch boundaries
    full = np.concatenate(_draws(GlobalOrder(sizes, batch, seed=3), range(1, 10)))  # 36 draws = 3 epochs
    for e in range(3):
        assert sorted(full[12 * e:12 * (e + 1)].tolist()) == list(range(12))
    assert not np.array_equal(full[:12], full[12:24])  # a new permutation each epoch
    assert not np.array_equal(np.sort(full[:12]), full[:12])  # shuffled across both sources
    resumed = np.concatenate(_draws(GlobalOrder(sizes, batch, seed=3, first_step=5), range(5, 10)))
    np.testing.assert_array_equal(resumed, full[16:])
    # two ranks: each takes its half of every global batch, in micro-batches; together the 1-process draws
    per_rank = [list(MicroBatches(GlobalOrder(sizes, batch, seed=3), rank=r, world=2, micro=1, first_step=1,
                                  last_step=9)) for r in range(2)]
    assert len(per_rank[0]) == 18
    merged = [x for s in range(9) for r in range(2) for mb in per_rank[r][2 * s:2 * s + 2] for x in mb]
    assert merged == full.tolist()


def test_weighted_sources_follow_their_weights_and_resume_exactly():
    sizes, batch = [50, 10], 20
    order = GlobalOrder(sizes, batch, seed=0, weights=[1.0, 3.0])
    draws = _draws(order, range(1, 201))
    ids = np.concatenate(draws)
    share = float((ids >= 50).mean())
    assert abs(share - 0.75) < 0.02, share  # 4000 draws: the weights, not the sizes (10 / 60)
    for k in range(1, 201):  # each source runs its own epochs: after any step its frames were drawn equally often
        counts = np.bincount(np.concatenate(draws[:k]), minlength=60)
        assert counts[:50].max() - counts[:50].min() <= 1 and counts[50:].max() - counts[50:].min() <= 1
    again = _draws(GlobalOrder(sizes, batch, seed=0, weights=[1.0, 3.0], first_step=150), range(150, 201))
    for a, b in zip(again, draws[149:], strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="in order"):
        order.batch(7)


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_workers_serve_the_samplers_order(tmp_path, workers):
    root = write_v30(tmp_path / "ds")
    data = FrameDataset([open_source(root)], chunk=3)
    sampler = MicroBatches(GlobalOrder([len(data)], 6, seed=1), rank=0, world=1, micro=3, first_step=1, last_step=4)
    batches = list(make_loader(data, sampler, workers=workers, prefetch=2))
    want = list(MicroBatches(GlobalOrder([len(data)], 6, seed=1), rank=0, world=1, micro=3, first_step=1, last_step=4))
    assert [b.ids for b in batches] == want
    for b in batches:
        assert b.actions.shape == (3, 3, 7) and b.obs[keys.MAIN_IMAGES].shape == (3, 32, 32, 3) and not b.bad
        for j, i in enumerate(b.ids):
            _, obs, chunk = data[i]
            torch.testing.assert_close(b.actions[j], torch.from_numpy(chunk), rtol=0, atol=0)
            assert b.obs[keys.TASK_DESCRIPTIONS][j] == obs[keys.TASK_DESCRIPTIONS]
