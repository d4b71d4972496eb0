"""`code_repair`: fix a bug in a small Python project until its tests pass (SWE-bench style).

Each task is one bundled project (projects.py) copied into a fresh private directory. The
model acts with one tool call per turn (protocol.py)::

    <tool>ls</tool>                        list the project's files
    <tool>view PATH</tool>                 show a file with line numbers
    <tool>replace PATH
    <old>exact old text</old>
    <new>new text</new></tool>              replace the one occurrence of the old text
    <tool>run_tests</tool>                 run the tests in the sandbox (sandbox.py)

Reward: 1.0 on the step whose test run passes every test (the episode ends there), else 0.
The episode also ends after `max_turns` actions. Files under ``tests/`` are read-only and are
restored before each run, so the only way to the reward is to fix the code. Every path is
resolved inside the sandbox (paths.py): absolute paths, ``..`` and symlinks leading out are
refused with an observation that says so. `seed` is accepted and ignored: a task is fully
determined by its `task_id`.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from pearl.envs.code_repair.paths import SandboxPathError, relative_to_root, resolve_in_sandbox
from pearl.envs.code_repair.projects import PROJECTS, Project
from pearl.envs.code_repair.sandbox import Limits, new_root, run_in_sandbox
from pearl.envs.protocol import (
    EpisodeOver,
    Observation,
    StepResult,
    ToolCall,
    check_task_id,
    parse_tool_call,
)

TOOLS_HELP = (
    "tools (one per turn): <tool>ls</tool> | <tool>view PATH</tool> | "
    "<tool>replace PATH\\n<old>OLD</old>\\n<new>NEW</new></tool> | <tool>run_tests</tool>"
)
_REPLACE_RE = re.compile(r"<old>(.*?)</old>\s*<new>(.*?)</new>", re.DOTALL)
_MAX_VIEW_BYTES = 16_384
_MAX_SOURCE_BYTES = 65_536
_MAX_LIST = 200


class CodeRepairEnv:
    """The code-repair environment (see module docstring). One episode at a time."""

    name = "code_repair"

    def __init__(
        self,
        *,
        max_turns: int = 8,
        limits: Limits | None = None,
        projects: tuple[Project, ...] = PROJECTS,
        work_dir: str | None = None,
    ) -> None:
        self.max_turns = max_turns
        self.limits = limits or Limits()
        self.projects = projects
        self.num_tasks = len(projects)
        self._work_dir = work_dir
        self._root: Path | None = None
        self._project: Project | None = None
        self._turn = 0
        self._done = False

    @property
    def root(self) -> Path | None:
        """The current sandbox directory (None before reset and after close)."""
        return self._root

    def reset(self, task_id: int, seed: int = 0) -> Observation:
        check_task_id(task_id, self.num_tasks)
        self.close()
        project = self.projects[task_id]
        root = new_root(prefix=f"pearl-{project.name}-", parent=self._work_dir)
        for rel, text in project.files:
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self._root, self._project = root, project
        self._turn, self._done = 0, False
        files = "\n".join(sorted(rel for rel, _ in project.files))
        text = (
            f"Repair the project '{project.name}'. Issue: {project.description}\n"
            f"files:\n{files}\n{TOOLS_HELP}\n"
        )
        return Observation(text, turn=0)

    def step(self, action_text: str) -> StepResult:
        if self._root is None or self._project is None:
            raise RuntimeError("step() before reset()")
        if self._done:
            raise EpisodeOver("episode is over; call reset()")
        self._turn += 1
        call = parse_tool_call(action_text)
        info: dict[str, Any] = {"tool": call.name if call else None}
        reward = 0.0
        if call is None:
            text = f"no tool call found. {TOOLS_HELP}"
            info["error"] = "no tool call"
        else:
            try:
                text, reward, extra = self._dispatch(call)
                info.update(extra)
            except SandboxPathError as err:
                text, info["error"] = f"refused: {err}", "path refused"
        solved = reward > 0
        self._done = solved or self._turn >= self.max_turns
        if self._done:
            info["solved"] = solved
        return StepResult(
            Observation(text.rstrip("\n") + "\n", turn=self._turn), reward, self._done, info
        )

    def close(self) -> None:
        """Delete the sandbox directory (idempotent)."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
        self._root, self._project = None, None

    # -- tools ---------------------------------------------------------------------------

    def _dispatch(self, call: ToolCall) -> tuple[str, float, dict[str, Any]]:
        assert self._root is not None
        if call.name == "ls":
            return self._ls(), 0.0, {}
        if call.name in ("view", "cat"):
            if not call.args:
                return "usage: <tool>view PATH</tool>", 0.0, {"error": "usage"}
            return self._view(" ".join(call.args)), 0.0, {}
        if call.name == "replace":
            if not call.args:
                return "usage: <tool>replace PATH ...</tool>", 0.0, {"error": "usage"}
            return self._replace(" ".join(call.args), call.body)
        if call.name in ("run_tests", "test", "run"):
            return self._run_tests()
        return f"unknown tool '{call.name}'. {TOOLS_HELP}", 0.0, {"error": "unknown tool"}

    def _ls(self) -> str:
        assert self._root is not None
        files = sorted(
            relative_to_root(self._root, p)
            for p in self._root.rglob("*")
            if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts
        )
        more = f"\n[... {len(files) - _MAX_LIST} more files]" if len(files) > _MAX_LIST else ""
        return "\n".join(files[:_MAX_LIST]) + more if files else "(empty)"

    def _view(self, user_path: str) -> str:
        assert self._root is not None
        path = resolve_in_sandbox(self._root, user_path)
        if path.is_dir():
            names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
            return "\n".join(names) or "(empty directory)"
        if not path.is_file():
            return f"no such file: {user_path}"
        with path.open("rb") as f:
            data = f.read(_MAX_VIEW_BYTES + 1)
        text = data[:_MAX_VIEW_BYTES].decode("utf-8", "replace")
        lines = [f"{i:4d}| {line}" for i, line in enumerate(text.splitlines(), 1)]
        more = "\n[... file truncated ...]" if len(data) > _MAX_VIEW_BYTES else ""
        return f"{relative_to_root(self._root, path)}:\n" + "\n".join(lines) + more

    def _replace(self, user_path: str, body: str) -> tuple[str, float, dict[str, Any]]:
        assert self._root is not None
        path = resolve_in_sandbox(self._root, user_path)
        rel = relative_to_root(self._root, path)
        if rel == "tests" or rel.startswith("tests/"):
            return "refused: files under tests/ are read-only", 0.0, {"error": "read-only"}
        if not path.is_file():
            return f"no such file: {user_path}", 0.0, {"error": "no such file"}
        match = _REPLACE_RE.search(body)
        if match is None:
            return (
                "usage: the body needs <old>OLD</old> then <new>NEW</new>",
                0.0,
                {"error": "usage"},
            )
        old, new = match.group(1), match.group(2)
        text = path.read_text(errors="replace")
        count = text.count(old) if old else 0
        if count != 1:
            what = "not found" if count == 0 else f"found {count} times (must be unique)"
            return f"old text {what} in {rel}", 0.0, {"error": "no unique match"}
        updated = text.replace(old, new, 1)
        if len(updated.encode()) > _MAX_SOURCE_BYTES:
            return f"refused: {rel} would exceed {_MAX_SOURCE_BYTES} bytes", 0.0, {"error": "size"}
        path.write_text(updated)
        return f"replaced 1 occurrence in {rel}", 0.0, {}

    def _run_tests(self) -> tuple[str, float, dict[str, Any]]:
        assert self._root is not None and self._project is not None
        self._restore_tests()
        res = run_in_sandbox(self._root, self.limits, mode="tests")
        info: dict[str, Any] = {
            "tests_passed": res.num_passed,
            "tests_failed": res.num_failed,
            "run_wall_s": round(res.wall_s, 4),
            "killed": res.killed_reason,
            "isolation": res.isolation,
        }
        text = res.output
        if res.killed_reason is not None:
            text += f"\n[sandbox: run killed ({res.killed_reason})]"
        passed = res.all_passed and res.num_passed == self._project.num_tests
        text += "\nall tests passed" if passed else ""
        return text, 1.0 if passed else 0.0, info

    def _restore_tests(self) -> None:
        assert self._root is not None and self._project is not None
        tests_dir = self._root / "tests"
        if tests_dir.is_symlink() or not tests_dir.is_dir():
            tests_dir.unlink(missing_ok=True)
        else:
            shutil.rmtree(tests_dir)
        for rel, text in self._project.files:
            if rel.startswith("tests/"):
                path = self._root / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
