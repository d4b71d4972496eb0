"""Agentic environments: one small text protocol (protocol.py), two environments
(`guess` in learnable.py, `code_repair` in code_repair/), a registry, and a pool with
per-step latency telemetry (pool.py). Standard library only (Ray is imported lazily by the
pool's Ray backend). See docs/environments.md.
"""

from pearl.envs.protocol import (
    Environment,
    EpisodeOver,
    Observation,
    StepResult,
    ToolCall,
    format_tool_call,
    parse_tool_call,
    play,
)
from pearl.envs.registry import env_names, make_env, register

__all__ = [
    "Environment",
    "EpisodeOver",
    "Observation",
    "StepResult",
    "ToolCall",
    "env_names",
    "format_tool_call",
    "make_env",
    "parse_tool_call",
    "play",
    "register",
]
