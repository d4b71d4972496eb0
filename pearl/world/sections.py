"""Config sections both worlds share, each field defined once.

The simulator's `SimConfig` and `pearl run`'s `RunConfig` describe the same system, so the
knobs they have in common carry one name, one type, one constraint and one help text, here.
Each world's section extends a shape with its own fields and may pick its own *defaults*
(`shape_field`): the simulator's are the paper's setting (16 training GPUs, 4 reserved,
batch 64, 32K tokens), `pearl run`'s fit a laptop.

`renamed_fields` catches the names the two configs used before they were merged, so an
old config fails with the name to use instead of a bare "extra field".
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from pearl.errors import InputError


class Shape(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def shape_field(cls, name: str, default: Any) -> Any:
        """The shape's field `name` (type constraint, help text) with another default."""
        return FieldInfo.merge_field_infos(cls.model_fields[name], default=default)


class ClusterShape(Shape):
    """How many GPUs each pool has and how many one rollout worker spans."""

    num_training_gpus: int = Field(
        16, ge=1, description="GPUs (device slots) of the trainer: the overlap zone, borrowable."
    )
    num_dedicated_gpus: int = Field(
        4, ge=0, description="Reserved rollout GPUs (device slots), always there."
    )
    gpus_per_worker: int = Field(1, ge=1, description="GPUs per rollout worker (tensor parallel).")


class RolloutShape(Shape):
    """The rollout batch and how far its weights may lag."""

    batch_size: int = Field(64, ge=1, description="Trajectories per rollout step (B).")
    max_context_tokens: int = Field(
        32768, ge=16, description="Trajectory length limit (context cap) in tokens."
    )
    max_staleness: int = Field(
        1, ge=0, description="Rollout may use weights at most this many versions old."
    )


class TraceShape(Shape):
    """What both worlds take from an availability trace."""

    reclaim_notice_s: float | None = Field(
        None, ge=0, description="Lead time of a reclaim notice; None uses the trace's own."
    )


# old name -> the shared name (both worlds' configs before the merge)
RENAMED: dict[str, str] = {
    "cluster.num_dedicated": "cluster.num_dedicated_gpus",
    "cluster.num_training": "cluster.num_training_gpus",
    "rollout.max_len_tokens": "rollout.max_context_tokens",
    "trainer.max_staleness": "rollout.max_staleness",
}


def renamed_fields(doc: Any, source: str) -> None:
    """Raise `InputError(source, field=old)` if `doc` uses a name that was renamed."""
    if not isinstance(doc, dict):
        return
    for old, new in RENAMED.items():
        section, name = old.split(".")
        if isinstance(doc.get(section), dict) and name in doc[section]:
            raise InputError(source, f"renamed: use {new}", field=old)


def renamed_key(dotted: str) -> str | None:
    """The new name of a renamed `section.field` key (None: not renamed)."""
    return RENAMED.get(dotted)
