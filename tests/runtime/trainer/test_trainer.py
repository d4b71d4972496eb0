"""The GRPO trainer on a tiny model: learning signal, versions, handoff, checkpoints."""

import pytest
import torch

from pearl.errors import InputError
from pearl.runtime.trainer.grpo_trainer import GrpoConfig, GRPOTrainer, TrainSample


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(vocab, 8)
        self.out = torch.nn.Linear(8, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(ids))


def _batch(trainer: GRPOTrainer, n: int = 8) -> list[TrainSample]:
    """Samples after prompt token 0: reward 1 for answering token 1, else 0."""
    model = trainer.model
    gen = torch.Generator().manual_seed(trainer.version)
    out = []
    for i in range(n):
        with torch.no_grad():
            probs = torch.softmax(model(torch.tensor([[0]]))[0, -1], -1)
        tok = int(torch.multinomial(probs, 1, generator=gen))
        lp = float(torch.log(probs[tok]))
        out.append(TrainSample(f"t{i}", 0, (0, tok), (0, 1), (0.0, lp), 1.0 if tok == 1 else 0.0))
    return out


def test_reward_rises_under_grpo():
    """The probability of the rewarded token grows over a few steps."""
    trainer = GRPOTrainer(TinyLM(), GrpoConfig(lr=0.1))
    p0 = torch.softmax(trainer.model(torch.tensor([[0]]))[0, -1], -1)[1].item()
    for _ in range(15):
        metrics = trainer.train_step(_batch(trainer))
    p1 = torch.softmax(trainer.model(torch.tensor([[0]]))[0, -1], -1)[1].item()
    assert p1 > p0 + 0.3
    assert metrics["version"] == 15 and trainer.snapshot()[0] == 15


def test_release_and_restore_keep_weights():
    trainer = GRPOTrainer(TinyLM(), GrpoConfig(lr=0.1))
    trainer.train_step(_batch(trainer))
    before = trainer.snapshot()[1]
    trainer.release()
    with pytest.raises(RuntimeError, match="released"):
        trainer.train_step(_batch(trainer))
    trainer.restore()
    after = trainer.snapshot()[1]
    assert all(torch.equal(before[k], after[k]) for k in before)
    trainer.train_step(_batch(trainer))


def test_checkpoint_round_trip_and_bad_paths(tmp_path):
    trainer = GRPOTrainer(TinyLM(), GrpoConfig(lr=0.1))
    trainer.train_step(_batch(trainer))
    trainer.save(tmp_path / "ckpt.pt")
    other = GRPOTrainer(TinyLM(vocab=4))
    other.load(tmp_path / "ckpt.pt")
    assert other.version == 1
    with pytest.raises(InputError, match="not found"):
        other.load(tmp_path / "none.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(InputError, match="not a trainer checkpoint"):
        other.load(tmp_path / "junk.pt")
    with pytest.raises(InputError, match="do not fit"):
        GRPOTrainer(TinyLM(vocab=5)).load(tmp_path / "ckpt.pt")
