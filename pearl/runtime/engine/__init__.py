"""PEARL's inference engine: a Qwen3 (dense/MoE) decoder with paged KV, continuous batching,
chunked prefill, prefix caching, seeded sampling with logprobs, and KV export/import."""

from pearl.runtime.engine.engine import LLMEngine
from pearl.runtime.engine.model import Qwen3ForCausalLM
from pearl.runtime.engine.model_config import ModelConfig
from pearl.runtime.engine.payload import KVPayload
from pearl.runtime.engine.request_errors import EngineReleased, RequestRejected
from pearl.runtime.engine.sampling import SamplingParams
from pearl.runtime.engine.sequence import RequestOutput
from pearl.runtime.engine.tokenizer import ByteTokenizer

__all__ = [
    "ByteTokenizer",
    "EngineReleased",
    "KVPayload",
    "LLMEngine",
    "ModelConfig",
    "Qwen3ForCausalLM",
    "RequestOutput",
    "RequestRejected",
    "SamplingParams",
]
