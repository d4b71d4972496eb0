"""Sandboxed code-repair environment (SWE-bench style): see env.py and sandbox.py."""

from pearl.envs.code_repair.env import CodeRepairEnv
from pearl.envs.code_repair.isolation import Isolation
from pearl.envs.code_repair.paths import SandboxPathError, resolve_in_sandbox
from pearl.envs.code_repair.projects import PROJECTS, Project
from pearl.envs.code_repair.sandbox import Limits, RunResult, isolation, probe_level, run_in_sandbox

__all__ = [
    "PROJECTS",
    "CodeRepairEnv",
    "Isolation",
    "Limits",
    "Project",
    "RunResult",
    "SandboxPathError",
    "isolation",
    "probe_level",
    "resolve_in_sandbox",
    "run_in_sandbox",
]
