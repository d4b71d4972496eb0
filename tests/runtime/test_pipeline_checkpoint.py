"""The training pipeline's checkpoints and failures, with a stand-in trainer (no Ray):
driver.json is written only once the trainer's file is whole, in order, and a failed
training-side task stops the run instead of hanging it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pearl.runtime.pipeline import TrainingPipeline


class _Saves:
    """`trainer.save.remote(path)`: a future the test resolves (writing the file) or fails."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, asyncio.Future[None]]] = []

    def remote(self, path: str) -> asyncio.Future[None]:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((path, fut))
        return fut

    def finish(self, i: int) -> None:
        path, fut = self.pending[i]
        Path(path).write_bytes(b"weights")
        fut.set_result(None)


def _pipeline(out: Path, saves: _Saves) -> TrainingPipeline:
    cfg: Any = SimpleNamespace(trainer=SimpleNamespace(num_steps=10))
    world: Any = SimpleNamespace(trajs={})
    trainer: Any = SimpleNamespace(save=saves)
    none: Any = None
    return TrainingPipeline(
        cfg=cfg, out_dir=out, world=world, lending=none, trainer=trainer, controller=none,
        recorder=none, emit=lambda e: None, now=lambda: 1.0, training_gpus=(), version=0,
    )  # fmt: skip


def _checkpoint(p: TrainingPipeline, version: int) -> None:
    """The pipeline checkpoints after training step `version` (weights of that version)."""
    p.version = p.trained_steps = version
    p.save_checkpoint()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_driver_json_follows_whole_trainer_files_in_order(tmp_path: Path) -> None:
    async def go() -> None:
        saves = _Saves()
        p = _pipeline(tmp_path, saves)
        ckpt = tmp_path / "checkpoint"
        _checkpoint(p, 1)
        _checkpoint(p, 2)
        saves.finish(1)  # version 2's file is whole first
        await _settle()
        assert not (ckpt / "driver.json").exists()  # version 1's is not written yet
        saves.finish(0)
        await p.checkpointed()
        doc = json.loads((ckpt / "driver.json").read_text())
        assert (doc["version"], doc["trainer_file"]) == (2, "trainer-2.pt")
        assert sorted(f.name for f in ckpt.glob("trainer*")) == ["trainer-2.pt"]
        assert not p.failure.done()

    asyncio.run(go())


def test_a_failed_save_stops_the_run_and_keeps_the_last_pair(tmp_path: Path) -> None:
    async def go() -> None:
        saves = _Saves()
        p = _pipeline(tmp_path, saves)
        ckpt = tmp_path / "checkpoint"
        _checkpoint(p, 1)
        saves.finish(0)
        await _settle()
        _checkpoint(p, 2)
        saves.pending[1][1].set_exception(RuntimeError("the trainer died"))
        await _settle()
        assert p.failure.done() and "the trainer died" in str(p.failure.result())
        doc = json.loads((ckpt / "driver.json").read_text())
        assert (doc["version"], doc["trainer_file"]) == (1, "trainer-1.pt")
        assert (ckpt / "trainer-1.pt").is_file()

    asyncio.run(go())
