"""Model, GPU and workload specifications (pydantic)."""

from pearl.specs.hardware import (
    GpuSpec,
    ModelSpec,
    get_gpu,
    get_model,
    gpu_specs,
    model_labels,
    model_specs,
)

__all__ = [
    "GpuSpec",
    "ModelSpec",
    "get_gpu",
    "get_model",
    "gpu_specs",
    "model_labels",
    "model_specs",
]
