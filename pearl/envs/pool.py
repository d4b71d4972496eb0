"""A pool of environment hosts (threads or Ray actors) with per-step latency telemetry.

The rollout runtime keeps many trajectories in flight; each one owns an environment session
on one host for its whole life (the environment is stateful: a sandbox directory, a secret).
The pool is asynchronous: ``submit_reset`` / ``submit_step`` return at once, ``wait``
returns the results that finished (an `EnvResult` each, with an `EnvStepRecord` holding the
step's submit, start and end times), so model turns and environment steps overlap (paper §2:
trajectories waiting on the environment free decode slots). ``reset`` / ``step`` are the
blocking conveniences.

Contracts:

* one outstanding operation per trajectory: submitting a second one for the same
  ``traj_id`` before its result was collected raises ``EnvPoolError`` (a caller bug);
* a trajectory is placed at reset on the host with the fewest sessions (ties: lowest index),
  so placement is deterministic; the session lives there until it is done (then it is
  closed automatically) or ``close_session`` is called;
* the blocking ``reset`` / ``step`` need an idle pool (no operation in flight);
* an environment that raises (e.g. ``step`` after done) does not kill the host: the result
  carries ``error`` and the blocking helpers raise ``EnvPoolError`` with that text;
* telemetry times are wall-clock ``time.time()`` seconds, comparable across processes on a
  machine (they feed ``TurnRecord.t_env_start_s`` / ``t_env_end_s``);
* backend ``"thread"`` runs hosts in this process (environments that wait on subprocesses
  release the GIL); backend ``"ray"`` runs one actor per host (``ray`` imported lazily; the
  caller has called ``ray.init``). Sessions live in host memory: a host that dies loses them,
  so place env actors on non-preemptible nodes (``ray_options``).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from pearl.envs.protocol import Environment, Observation, StepResult
from pearl.envs.registry import make_env

Backend = Literal["thread", "ray"]


class EnvPoolError(RuntimeError):
    """Misuse of the pool, or an environment raised while serving a request."""


@dataclass(frozen=True, slots=True)
class EnvStepRecord:
    """Telemetry of one environment call (reset or step)."""

    traj_id: str
    kind: Literal["reset", "step"]
    turn: int
    host: int
    env_name: str
    t_submit_s: float
    t_start_s: float
    t_end_s: float
    reward: float
    done: bool

    @property
    def latency_s(self) -> float:
        """Time inside the environment."""
        return self.t_end_s - self.t_start_s

    @property
    def queue_s(self) -> float:
        """Time between submission and start (waiting for a free host thread)."""
        return self.t_start_s - self.t_submit_s

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class EnvResult:
    """One finished call: the observation (and step result for steps) plus telemetry."""

    traj_id: str
    kind: Literal["reset", "step"]
    observation: Observation | None
    step: StepResult | None
    record: EnvStepRecord
    error: str | None = None


class SessionHost:
    """Holds environment sessions by trajectory id; the unit a thread or a Ray actor runs."""

    def __init__(self, env_name: str, host: int, env_kwargs: dict[str, Any] | None = None) -> None:
        self.env_name, self.host = env_name, host
        self.env_kwargs = dict(env_kwargs or {})
        self._sessions: dict[str, Environment] = {}
        self._turns: dict[str, int] = {}
        self._lock = threading.Lock()

    def reset(self, traj_id: str, task_id: int, seed: int, t_submit_s: float) -> EnvResult:
        start = time.time()
        try:
            with self._lock:
                env = self._sessions.get(traj_id)
            if env is None:
                env = make_env(self.env_name, **self.env_kwargs)
            obs = env.reset(task_id, seed)
            with self._lock:
                self._sessions[traj_id] = env
                self._turns[traj_id] = 0
            error = None
        except Exception as err:  # an env bug must not kill the host
            obs, error = None, f"{type(err).__name__}: {err}"
        record = self._record(traj_id, "reset", 0, t_submit_s, start, 0.0, False)
        return EnvResult(traj_id, "reset", obs, None, record, error)

    def step(self, traj_id: str, action_text: str, t_submit_s: float) -> EnvResult:
        start = time.time()
        with self._lock:
            env = self._sessions.get(traj_id)
            turn = self._turns.get(traj_id, 0) + 1
        if env is None:
            record = self._record(traj_id, "step", turn, t_submit_s, start, 0.0, False)
            return EnvResult(traj_id, "step", None, None, record, f"no session for '{traj_id}'")
        try:
            result = env.step(action_text)
        except Exception as err:
            record = self._record(traj_id, "step", turn, t_submit_s, start, 0.0, False)
            return EnvResult(traj_id, "step", None, None, record, f"{type(err).__name__}: {err}")
        with self._lock:
            self._turns[traj_id] = turn
        if result.done:
            self.close(traj_id)
        record = self._record(traj_id, "step", turn, t_submit_s, start, result.reward, result.done)
        return EnvResult(traj_id, "step", result.observation, result, record)

    def close(self, traj_id: str) -> bool:
        with self._lock:
            env = self._sessions.pop(traj_id, None)
            self._turns.pop(traj_id, None)
        if env is not None:
            env.close()
        return env is not None

    def num_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    def shutdown(self) -> None:
        with self._lock:
            ids = list(self._sessions)
        for traj_id in ids:
            self.close(traj_id)

    def _record(
        self,
        traj_id: str,
        kind: Any,
        turn: int,
        t_submit_s: float,
        start: float,
        reward: float,
        done: bool,
    ) -> EnvStepRecord:
        return EnvStepRecord(
            traj_id,
            kind,
            turn,
            self.host,
            self.env_name,
            t_submit_s,
            start,
            time.time(),
            reward,
            done,
        )


class EnvPool:
    """Asynchronous pool of `num_hosts` session hosts (see module docstring)."""

    def __init__(
        self,
        env_name: str,
        num_hosts: int = 2,
        *,
        backend: Backend = "thread",
        env_kwargs: dict[str, Any] | None = None,
        threads_per_host: int = 4,
        ray_options: dict[str, Any] | None = None,
    ) -> None:
        if num_hosts < 1 or threads_per_host < 1:
            raise ValueError("num_hosts and threads_per_host must be >= 1")
        probe = make_env(env_name, **(env_kwargs or {}))  # fail fast on a bad name or kwargs
        self.num_tasks, self.max_turns = probe.num_tasks, probe.max_turns
        probe.close()
        self.env_name, self.backend = env_name, backend
        self.num_hosts = num_hosts
        self._placement: dict[str, int] = {}
        self._sessions_per_host = [0] * num_hosts
        self._pending: dict[Any, str] = {}  # future / ObjectRef -> traj_id
        self._busy: set[str] = set()
        self.records: list[EnvStepRecord] = []
        if backend == "thread":
            self._hosts: list[Any] = [
                SessionHost(env_name, i, env_kwargs) for i in range(num_hosts)
            ]
            self._executor = cf.ThreadPoolExecutor(num_hosts * threads_per_host, "env-host")
        elif backend == "ray":
            import ray

            opts = {"num_cpus": 0, "max_concurrency": threads_per_host, **(ray_options or {})}
            actor_cls = ray.remote(SessionHost).options(**opts)
            self._hosts = [actor_cls.remote(env_name, i, env_kwargs) for i in range(num_hosts)]
        else:
            raise ValueError(f"unknown backend '{backend}' (use 'thread' or 'ray')")

    # -- asynchronous API ----------------------------------------------------------------

    def submit_reset(self, traj_id: str, task_id: int, seed: int = 0) -> None:
        """Start (or restart) trajectory `traj_id` on task `task_id`."""
        if traj_id not in self._placement:
            host = min(range(self.num_hosts), key=lambda i: (self._sessions_per_host[i], i))
            self._placement[traj_id] = host
            self._sessions_per_host[host] += 1
        self._submit(traj_id, "reset", task_id, seed)

    def submit_step(self, traj_id: str, action_text: str) -> None:
        """Apply the model's response for this turn of trajectory `traj_id`."""
        if traj_id not in self._placement:
            raise EnvPoolError(f"trajectory '{traj_id}' has no session (reset it first)")
        self._submit(traj_id, "step", action_text)

    def wait(self, timeout_s: float | None = None) -> list[EnvResult]:
        """Results that finished (at least one unless `timeout_s` passes; [] if none pending)."""
        if not self._pending:
            return []
        done: list[Any]
        results: list[EnvResult]
        if self.backend == "thread":
            finished, _ = cf.wait(list(self._pending), timeout_s, cf.FIRST_COMPLETED)
            done = list(finished)
            results = [fut.result() for fut in done]
        else:
            import ray

            ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=timeout_s)
            more, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
            done = list(dict.fromkeys([*ready, *more]))
            results = list(ray.get(done))
        for handle in done:
            self._busy.discard(self._pending.pop(handle))
        results.sort(key=lambda r: (r.record.t_end_s, r.traj_id))
        for res in results:
            self.records.append(res.record)
            if res.step is not None and res.step.done:
                self._forget(res.traj_id)
        return results

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    # -- blocking helpers ----------------------------------------------------------------

    def reset(self, traj_id: str, task_id: int, seed: int = 0) -> Observation:
        self._check_idle()
        self.submit_reset(traj_id, task_id, seed)
        res = self._wait_for(traj_id)
        assert res.observation is not None
        return res.observation

    def step(self, traj_id: str, action_text: str) -> StepResult:
        self._check_idle()
        self.submit_step(traj_id, action_text)
        res = self._wait_for(traj_id)
        assert res.step is not None
        return res.step

    def close_session(self, traj_id: str) -> None:
        """Drop a trajectory's session (no-op if unknown or already done)."""
        host = self._placement.get(traj_id)
        if host is None:
            return
        if traj_id in self._busy:
            raise EnvPoolError(f"trajectory '{traj_id}' has an operation in flight")
        if self.backend == "thread":
            self._hosts[host].close(traj_id)
        else:
            import ray

            ray.get(self._hosts[host].close.remote(traj_id))
        self._forget(traj_id)

    def shutdown(self) -> None:
        """Close every session and stop the hosts (pending results are dropped)."""
        if self.backend == "thread":
            self._executor.shutdown(wait=True)
            for host in self._hosts:
                host.shutdown()
        else:
            import ray

            ray.get([h.shutdown.remote() for h in self._hosts])
            for h in self._hosts:
                ray.kill(h)
        self._pending.clear()
        self._busy.clear()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- internals -----------------------------------------------------------------------

    def _submit(self, traj_id: str, kind: str, *args: Any) -> None:
        if traj_id in self._busy:
            raise EnvPoolError(f"trajectory '{traj_id}' already has an operation in flight")
        host = self._hosts[self._placement[traj_id]]
        call_args = (traj_id, *args, time.time())
        handle: Any
        if self.backend == "thread":
            handle = self._executor.submit(getattr(host, kind), *call_args)
        else:
            handle = getattr(host, kind).remote(*call_args)
        self._pending[handle] = traj_id
        self._busy.add(traj_id)

    def _wait_for(self, traj_id: str) -> EnvResult:
        (res,) = self.wait()
        if res.error is not None:
            raise EnvPoolError(f"{traj_id}: {res.error}")
        return res

    def _check_idle(self) -> None:
        if self._pending:
            raise EnvPoolError("blocking call while operations are in flight; use wait()")

    def _forget(self, traj_id: str) -> None:
        host = self._placement.pop(traj_id, None)
        if host is not None:
            self._sessions_per_host[host] -= 1
