"""The code-repair environment: bundled projects, tools, rewards, determinism."""

from __future__ import annotations

import pytest

from pearl.envs import EpisodeOver, format_tool_call
from pearl.envs.code_repair import PROJECTS, CodeRepairEnv, Limits

FAST = Limits(wall_timeout_s=15, cpu_time_s=5)  # generous: the machine may be loaded


def _replace(path: str, old: str, new: str) -> str:
    return format_tool_call("replace", path, body=f"<old>{old}</old>\n<new>{new}</new>")


@pytest.fixture
def env():
    e = CodeRepairEnv(limits=FAST, max_turns=6)
    yield e
    e.close()


@pytest.mark.parametrize("task_id", range(len(PROJECTS)))
def test_bug_fails_then_reference_fix_passes(env, task_id):
    """Every project starts with a failing test; its reference fix earns reward 1 and ends."""
    project = PROJECTS[task_id]
    obs = env.reset(task_id, seed=0)
    assert project.description in obs.text and "<tool>run_tests</tool>" in obs.text
    before = env.step("<tool>run_tests</tool>")
    assert before.reward == 0.0 and not before.done
    assert before.info["tests_failed"] >= 1 and "FAIL" in before.observation.text
    edit = env.step(_replace(project.fix_path, project.fix_old, project.fix_new))
    assert "replaced 1 occurrence" in edit.observation.text
    after = env.step("<tool>run_tests</tool>")
    assert after.reward == 1.0 and after.done and after.info["solved"]
    assert (
        after.info["tests_passed"] == project.num_tests
        and "all tests passed" in after.observation.text
    )


def test_view_and_ls(env):
    """ls lists project files; view shows numbered lines; missing files are reported."""
    env.reset(0)
    assert env.step("<tool>ls</tool>").observation.text.splitlines() == [
        "stats.py",
        "tests/test_stats.py",
    ]
    text = env.step("<tool>view stats.py</tool>").observation.text
    assert text.startswith("stats.py:\n   1| def total(xs):")
    assert "no such file" in env.step("<tool>view nope.py</tool>").observation.text
    assert "usage" in env.step("<tool>view</tool>").observation.text


def test_replace_errors(env):
    """Replacements must match exactly once, need both tags, and tests/ is read-only."""
    env.reset(0)
    assert "not found" in env.step(_replace("stats.py", "nothing like this", "x")).observation.text
    res = env.step(_replace("stats.py", "xs", "ys"))
    assert "found" in res.observation.text and "times" in res.observation.text
    assert "usage" in env.step("<tool>replace stats.py\nno tags</tool>").observation.text
    res = env.step(_replace("tests/test_stats.py", "3.0", "6.0"))
    assert "read-only" in res.observation.text and res.info["error"] == "read-only"


def test_tampered_tests_are_restored(env):
    """Editing a test file behind the env's back does not earn the reward."""
    env.reset(0)
    assert env.root is not None
    (env.root / "tests" / "test_stats.py").write_text("def test_ok():\n    pass\n")
    res = env.step("<tool>run_tests</tool>")
    assert res.reward == 0.0 and "test_mean" in res.observation.text


def test_faked_exit_earns_nothing(env):
    """Code that exits early with status 0 does not pass for a successful test run."""
    env.reset(0)
    env.step(_replace("stats.py", "def total(xs):", "import os\nos._exit(0)\ndef total(xs):"))
    res = env.step("<tool>run_tests</tool>")
    assert res.reward == 0.0 and not res.done


def test_unknown_and_missing_tools_and_turn_limit(env):
    """Bad actions get a helpful observation; the episode ends after max_turns."""
    env.reset(1)
    res = env.step("I think the bug is in slug.py")
    assert "unknown tool" in res.observation.text and "run_tests" in res.observation.text
    res = env.step("   ")
    assert "no tool call" in res.observation.text
    for _ in range(4):
        res = env.step("<tool>ls</tool>")
    assert res.done and res.info["solved"] is False and res.reward == 0.0
    with pytest.raises(EpisodeOver):
        env.step("<tool>ls</tool>")


def test_deterministic_observations():
    """Same task and actions: byte-identical observations in two fresh environments."""
    actions = [
        "<tool>run_tests</tool>",
        "<tool>view seq/window.py</tool>",
        "<tool>run_tests</tool>",
    ]
    runs = []
    for _ in range(2):
        e = CodeRepairEnv(limits=FAST)
        texts = [e.reset(4, seed=3).text] + [e.step(a).observation.text for a in actions]
        runs.append(texts)
        e.close()
    assert runs[0] == runs[1]


def test_close_removes_sandbox_and_reset_starts_fresh(env):
    """close() deletes the sandbox; a new reset gives a new, pristine directory."""
    env.reset(2)
    first = env.root
    env.step(_replace("stack.py", "self.items.pop(0)", "self.items.pop()"))
    env.reset(2)
    assert first is not None and not first.exists() and env.root != first
    assert "pop(0)" in env.step("<tool>view stack.py</tool>").observation.text
    root = env.root
    env.close()
    assert root is not None and not root.exists() and env.root is None


def test_ls_is_bounded_and_skips_symlinks(env):
    """Many files are summarised past 200 entries; symlinks are not listed."""
    env.reset(0)
    assert env.root is not None
    for i in range(250):
        (env.root / f"f{i:03d}.txt").write_text("")
    (env.root / "link").symlink_to("/etc/passwd")
    text = env.step("<tool>ls</tool>").observation.text
    assert text.endswith("[... 52 more files]\n") and "link" not in text.split()
