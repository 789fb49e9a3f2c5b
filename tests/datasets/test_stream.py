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


def test_broken_datasets_stop_before_training_with_the_episode_named(tmp_path):
    from test_lerobot import _frame_table

    pq = pytest.importorskip("pyarrow.parquet")
    schema = write_v21(tmp_path / "schema")  # episode 1 gains a state dim: the schema changes between episodes
    pq.write_table(_frame_table(1, LENGTHS[0], state_width=9), schema / "data/chunk-000/episode_000001.parquet")
    with pytest.raises(VlarlError, match=r"episode 1 .* 9-d states .* first episode has 8 / 7") as err:
        open_source(schema)
    assert "Re-export" in err.value.fix
    video = write_v21(tmp_path / "video")
    missing = video / "videos/chunk-000/observation.images.wrist_image/episode_000001.mp4"
    missing.unlink()
    with pytest.raises(VlarlError, match=r"episode 1: the video of camera observation.images.wrist_image is missing"):
        open_source(video)
    with pytest.raises(VlarlError, match=r'no feature "observation.nope" for the state \(features: '):
        open_source(write_v30(tmp_path / "key"), state_key="observation.nope")
    column = write_v30(tmp_path / "column")  # a column meta/info.json promises but a data file lacks
    table = pq.read_table(column / "data/chunk-000/file-000.parquet").drop_columns(["action"])
    pq.write_table(table, column / "data/chunk-000/file-000.parquet")
    with pytest.raises(VlarlError, match=r"has no column\(s\) \['action'\]"):
        open_source(column)


def _corrupt_png(root, episode: int, frame: int) -> None:
    """Replace the main camera's PNG of one frame by bytes that are not an image."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = root / f"data/chunk-000/episode_{episode:06d}.parquet"
    table = pq.read_table(path)
    cells = table.column("image").to_pylist()
    cells[frame] = {"bytes": b"\x89PNG not really", "path": None}
    pq.write_table(table.set_column(table.column_names.index("image"), "image", pa.array(cells)), path)


def test_a_corrupt_frame_is_a_bad_sample_naming_episode_frame_and_camera(tmp_path):
    root = write_openpi_images(tmp_path / "ds")
    _corrupt_png(root, 1, 3)
    data = FrameDataset([open_source(root)], chunk=2)  # indexing reads no image: the dataset opens
    bad = data[LENGTHS[0] + 3]
    assert isinstance(bad, BadFrame) and bad.where == f"{root} episode 1 frame 3 camera image"
    assert "Cannot decode the image" in bad.problem
    assert not isinstance(data[LENGTHS[0] + 2], BadFrame)  # its neighbours still read
    sampler = MicroBatches(GlobalOrder([len(data)], len(data), seed=0), rank=0, world=1, micro=len(data),
                           first_step=1, last_step=1)
    (batch,) = list(make_loader(data, sampler, workers=1))
    assert len(batch) == len(data) - 1 and [b.index for b in batch.bad] == [LENGTHS[0] + 3]


@pytest.mark.parametrize("skip", [False, True])
def test_sft_stops_on_a_corrupt_frame_unless_asked_to_skip_it(tmp_path, skip):
    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training.sft import train_sft

    root = write_openpi_images(tmp_path / "ds")
    _corrupt_png(root, 1, 3)
    loaded = load_config("sft_quickstart", [f"runner.logger.log_path={tmp_path / 'run'}", "actor.micro_batch_size=4",
                                            "actor.global_batch_size=12", "sft.num_workers=1",
                                            f"sft.skip_bad_frames={str(skip).lower()}"])
    if not skip:
        with pytest.raises(VlarlError, match=r"Step 1 cannot read its sample .*episode 1 frame 3 camera image") as err:
            train_sft(loaded, demos=root, steps=2, quiet=True)
        assert "sft.skip_bad_frames=true" in err.value.fix
        return
    result = train_sft(loaded, demos=root, steps=2, quiet=True)  # 12 of the 12 frames per step: the bad one each time
    import json

    rows = [json.loads(line) for line in (tmp_path / "run" / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["train/sft/skipped_frames"] for r in rows] == [1.0, 2.0] and np.isfinite(result.losses).all()
    assert json.loads((result.checkpoint / "sft_state.json").read_text())["skipped_frames"] == 2


def test_streamed_sft_killed_mid_epoch_resumes_into_the_uninterrupted_run(tmp_path, monkeypatch):
    """A tiny pi0 on a streamed v3.0 dataset (12 frames, 8 per step: step 2 crosses the epoch boundary),
    DataLoader workers decoding: killed during step 3, resumed from the step-2 checkpoint, it repeats the
    uninterrupted run's losses and final weights exactly."""
    from safetensors.torch import load_file

    from vlarl_cli.config.loading import load_config
    from vlarl_cli.training import sft as sft_mod

    root = write_v30(tmp_path / "ds")
    over = ["actor.micro_batch_size=4", "actor.global_batch_size=8", "sft.num_workers=1", "sft.save_interval=2"]

    def run(name: str, resume: str | None = None):
        loaded = load_config("sft_quickstart", [f"runner.logger.log_path={tmp_path / name}", *over])
        return sft_mod.train_sft(loaded, demos=root, steps=4, quiet=True, resume=resume)

    full = run("full")
    real_step = sft_mod._Learner.step

    def dying_step(self, step, batches):
        if step == 3:
            raise KeyboardInterrupt
        return real_step(self, step, batches)

    monkeypatch.setattr(sft_mod._Learner, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        run("cut")
    monkeypatch.setattr(sft_mod._Learner, "step", real_step)
    resumed = run("cut", resume="auto")
    assert resumed.losses == full.losses[2:] and len(full.losses) == 4
    wa, wb = (load_file(str(next(r.checkpoint.glob("*.safetensors")))) for r in (full, resumed))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
