"""Inference-engine backends a rollout worker can drive (docs/engines.md).

`EngineBackend` (`pearl.runtime.backends.interface`) is the one interface, in the worker's
terms; `Capabilities` says what a backend can do, so the controller and the worker never
ask it for more. PEARL's own engine (`pearl.runtime.engine.LLMEngine`) is the reference
backend; `pearl.runtime.backends.vllm_engine.VllmEngine` runs vLLM (optional extra
`pearl-rl[vllm]`).
"""

from pearl.runtime.backends.interface import (
    BACKENDS,
    Capabilities,
    EngineBackend,
    StepTelemetry,
    capabilities_of,
)

__all__ = ["BACKENDS", "Capabilities", "EngineBackend", "StepTelemetry", "capabilities_of"]
