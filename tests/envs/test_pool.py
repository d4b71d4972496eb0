"""The environment pool: async trajectories on threads and Ray actors, with telemetry."""

from __future__ import annotations

import os

import pytest

from pearl.envs.learnable import GuessEnv, oracle_policy
from pearl.envs.pool import EnvPool, EnvPoolError


def _run_oracle(pool: EnvPool, num_traj: int) -> dict[str, list[str]]:
    """Drive `num_traj` guess trajectories concurrently with the oracle; return transcripts."""
    policy = oracle_policy()
    transcripts: dict[str, list[str]] = {}
    for i in range(num_traj):
        pool.submit_reset(f"traj-{i}", task_id=i, seed=0)
    finished = 0
    while pool.num_pending:
        for res in pool.wait(timeout_s=30):
            assert res.error is None, res.error
            tr = transcripts.setdefault(res.traj_id, [])
            assert res.observation is not None
            tr.append(res.observation.text)
            if res.step is not None and res.step.done:
                finished += 1
                continue
            action = policy(tr)
            tr.append(action)
            pool.submit_step(res.traj_id, action)
    assert finished == num_traj
    return transcripts


def _check_records(pool: EnvPool, transcripts: dict[str, list[str]]) -> None:
    steps = sum((len(t) - 1) // 2 for t in transcripts.values())
    assert len(pool.records) == len(transcripts) + steps  # one record per reset and per step
    for rec in pool.records:
        assert rec.t_submit_s <= rec.t_start_s <= rec.t_end_s
        assert rec.latency_s >= 0 and rec.queue_s >= 0 and rec.env_name == "guess"
    by_traj: dict[str, list[int]] = {}
    for rec in pool.records:
        by_traj.setdefault(rec.traj_id, []).append(rec.turn)
    for turns in by_traj.values():
        assert turns == list(range(len(turns)))  # reset is turn 0, then 1, 2, ...


def test_thread_pool_runs_trajectories_like_a_single_env():
    """Concurrent trajectories give the same transcripts as one env played serially."""
    with EnvPool("guess", num_hosts=3) as pool:
        transcripts = _run_oracle(pool, 12)
        _check_records(pool, transcripts)
        hosts = {rec.host for rec in pool.records}
        assert hosts == {0, 1, 2}
    env = GuessEnv()
    from pearl.envs import play

    for i in range(12):
        assert transcripts[f"traj-{i}"] == play(env, oracle_policy(), i)[1]


def test_one_operation_in_flight_per_trajectory():
    """A second submission before the first result is collected is a caller error."""
    with EnvPool("guess", num_hosts=1) as pool:
        pool.submit_reset("a", 0)
        with pytest.raises(EnvPoolError, match="in flight"):
            pool.submit_step("a", "5")
        with pytest.raises(EnvPoolError, match="in flight"):
            pool.reset("b", 1)
        pool.wait()
        with pytest.raises(EnvPoolError, match="no session"):
            pool.submit_step("zzz", "1")


def test_done_sessions_are_closed_and_errors_reported():
    """A finished trajectory's session is gone; env errors come back as EnvPoolError."""
    with EnvPool("guess", num_hosts=2, env_kwargs={"max_turns": 1}) as pool:
        pool.reset("a", 0)
        assert pool.step("a", "no digit").done
        with pytest.raises(EnvPoolError, match="no session"):
            pool.step("a", "1")
        with pytest.raises(EnvPoolError, match="out of range"):
            pool.reset("b", 10**6)


def test_code_repair_sessions_clean_up():
    """Sandbox directories live as long as their session and vanish on close/shutdown."""
    with EnvPool("code_repair", num_hosts=2) as pool:
        obs = pool.reset("x", 0)
        assert "stats" in obs.text
        res = pool.step("x", "<tool>run_tests</tool>")
        assert res.info["tests_failed"] == 1 and not res.done
        host = pool._hosts[pool._placement["x"]]
        root = host._sessions["x"].root
        assert root is not None and root.exists()
        pool.close_session("x")
        assert not root.exists()


def test_pool_reports_env_shape():
    """The pool exposes its environment's task count and turn limit (for task sampling)."""
    with EnvPool("guess", num_hosts=1, env_kwargs={"max_turns": 3}) as pool:
        assert (pool.num_tasks, pool.max_turns) == (1000, 3)
    with pytest.raises(KeyError, match="unknown environment"):
        EnvPool("nope")


def test_placement_balances_sessions():
    """New trajectories go to the host with the fewest sessions (ties: lowest index)."""
    with EnvPool("guess", num_hosts=3) as pool:
        for i in range(7):
            pool.reset(f"t{i}", i)
        assert pool._sessions_per_host == [3, 2, 2]
        assert [pool._placement[f"t{i}"] for i in range(4)] == [0, 1, 2, 0]


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = pytest.importorskip("ray")
    # address="local": never attach to a cluster someone started with `ray start` on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.ray
def test_ray_pool_matches_thread_pool(ray_cluster):
    """Ray actors serve the same trajectories with the same results and telemetry."""
    with EnvPool("guess", num_hosts=2, backend="ray") as pool:
        transcripts = _run_oracle(pool, 8)
        _check_records(pool, transcripts)
    with EnvPool("guess", num_hosts=2) as local:
        assert _run_oracle(local, 8) == transcripts


@pytest.mark.ray
def test_ray_pool_code_repair(ray_cluster):
    """The sandboxed env runs inside an actor; the reference fix is rewarded there too."""
    from pearl.envs import format_tool_call
    from pearl.envs.code_repair import PROJECTS

    p = PROJECTS[2]
    with EnvPool("code_repair", num_hosts=1, backend="ray") as pool:
        pool.reset("r", 2)
        body = f"<old>{p.fix_old}</old>\n<new>{p.fix_new}</new>"
        pool.step("r", format_tool_call("replace", p.fix_path, body=body))
        res = pool.step("r", "<tool>run_tests</tool>")
        assert res.reward == 1.0 and res.done
        assert pool.records[-1].latency_s > 0
