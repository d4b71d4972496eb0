"""Environments by name: `make_env("guess")`, `make_env("code_repair", max_turns=6)`.

A factory takes keyword arguments only and returns a fresh `Environment`. Factories are
plain module-level callables so a name can be shipped to a Ray actor or a process and the
environment built there (environments themselves hold temp dirs and are not shipped).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pearl.envs.protocol import Environment

EnvFactory = Callable[..., Environment]


def _guess(**kwargs: Any) -> Environment:
    from pearl.envs.learnable import GuessEnv

    return GuessEnv(**kwargs)


def _code_repair(**kwargs: Any) -> Environment:
    from pearl.envs.code_repair import CodeRepairEnv

    return CodeRepairEnv(**kwargs)


_REGISTRY: dict[str, EnvFactory] = {"guess": _guess, "code_repair": _code_repair}


def register(name: str, factory: EnvFactory) -> None:
    """Add an environment; re-registering a name replaces it (tests use this)."""
    _REGISTRY[name] = factory


def env_names() -> list[str]:
    return sorted(_REGISTRY)


def make_env(name: str, **kwargs: Any) -> Environment:
    """A fresh environment; unknown names raise KeyError listing the known ones."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown environment '{name}' (known: {', '.join(env_names())})") from None
    return factory(**kwargs)
