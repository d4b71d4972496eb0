"""The trainer as a Ray actor on the training devices (paper §4.6, §5).

It wraps `GRPOTrainer`: trains on a finished rollout batch, publishes each new version to
the weight-snapshot registry (workers pull it by version), releases and restores its device
state while rollout borrows the training devices (the process stays alive), and writes
checkpoints for `pearl run --resume`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from pearl.runtime.trainer.grpo_trainer import GrpoConfig, GRPOTrainer, TrainSample


def causal_lm_logits(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Whole-sequence forward of the engine's Qwen3 model (right-padded rows)."""
    b, t = input_ids.shape
    positions = torch.arange(t, device=input_ids.device).expand(b, t)
    return model(input_ids, positions)


class TrainerActor:
    """Create with `start_trainer`; every method is a remote call."""

    def __init__(
        self,
        model_config: Any,
        trainer_cfg: GrpoConfig,
        *,
        init_seed: int = 0,
        checkpoint_dir: str | None = None,
        registry_name: str | None = None,
        pad_id: int = 0,
        torch_threads: int = 1,
        device: str = "cpu",
    ) -> None:
        from pearl.runtime.engine import Qwen3ForCausalLM
        from pearl.runtime.engine.checkpoint import load_checkpoint

        torch.set_num_threads(max(1, torch_threads))
        if checkpoint_dir:
            model_config, weights = load_checkpoint(checkpoint_dir, dtype=torch.float32)
            model = Qwen3ForCausalLM(model_config)
            model.load_state_dict(weights, strict=False)
        else:
            model = Qwen3ForCausalLM(model_config)
            model.init_weights(init_seed)
        self.trainer = GRPOTrainer(
            model, trainer_cfg, device=device, logits_fn=causal_lm_logits, pad_id=pad_id
        )
        self.registry_name = registry_name

    def version(self) -> int:
        return self.trainer.version

    def publish(self) -> int:
        """Put the current weights in the registry as `version`; returns it."""
        import ray

        from pearl.runtime.snapshots import publish_weights

        version, weights = self.trainer.snapshot()
        registry = ray.get_actor(self.registry_name) if self.registry_name else None
        if registry is not None:
            publish_weights(registry, weights, version, metadata={"source": "trainer"})
        return version

    def train(self, samples: list[TrainSample]) -> dict[str, float]:
        """One GRPO step, then publish the new version. Returns metrics (incl. step_time_s)."""
        t0 = time.perf_counter()
        metrics = self.trainer.train_step(samples)
        metrics["train_time_s"] = time.perf_counter() - t0
        self.publish()
        return metrics

    def release(self) -> float:
        t0 = time.perf_counter()
        self.trainer.release()
        return time.perf_counter() - t0

    def restore(self) -> float:
        t0 = time.perf_counter()
        self.trainer.restore()
        return time.perf_counter() - t0

    def save(self, path: str) -> None:
        self.trainer.save(Path(path))

    def load(self, path: str) -> int:
        self.trainer.load(Path(path))
        return self.trainer.version


def start_trainer(options: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """Create the trainer actor with Ray `options` (placement on the training node)."""
    import ray

    return ray.remote(TrainerActor).options(max_restarts=0, **options).remote(*args, **kwargs)
