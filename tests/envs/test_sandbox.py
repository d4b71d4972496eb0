"""Escape attempts against the code-repair sandbox: each is refused or contained, quickly.

Model-written code runs through the environment's `run_tests` tool (the audit-hook policy of
the default limits); the OS layers (network/PID namespaces, uid drop, RLIMIT_NPROC) are tried
directly by letting the sandboxed code start a fresh interpreter that has no audit hook.
"""

from __future__ import annotations

import os
import shutil
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.envs.code_repair import (
    CodeRepairEnv,
    Limits,
    Project,
    SandboxPathError,
    resolve_in_sandbox,
)
from pearl.envs.code_repair.isolation import UID_BASE, Isolation
from pearl.envs.code_repair.sandbox import (
    isolation,
    new_root,
    prepare_root,
    probe_level,
    run_in_sandbox,
)

# Generous wall time for runs that must finish on their own (the machine may be loaded);
# the tests that expect a kill set tight limits of their own.
FAST = Limits(wall_timeout_s=15, cpu_time_s=5, max_output_bytes=2048, kill_output_bytes=200_000)


def _attempt(body: str, limits: Limits = FAST):
    """Run `body` (inside a function called by a test) through the env; return the step."""
    source = "def run():\n" + textwrap.indent(textwrap.dedent(body), "    ") + "\n"
    project = Project(
        name="escape",
        description="escape attempt",
        files=(
            ("mod.py", source),
            ("tests/test_mod.py", "import mod\n\n\ndef test_run():\n    mod.run()\n"),
        ),
        fix_path="mod.py",
        fix_old="",
        fix_new="",
    )
    env = CodeRepairEnv(projects=(project,), limits=limits)
    env.reset(0)
    start = time.monotonic()
    res = env.step("<tool>run_tests</tool>")
    elapsed = time.monotonic() - start
    env.close()
    return res, elapsed


def _script(code: str, limits: Limits, iso: Isolation | None = None):
    root = new_root()
    try:
        (root / "s.py").write_text(textwrap.dedent(code))
        return run_in_sandbox(root, limits, mode="script", script="s.py", iso=iso)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _sandbox_uid_processes() -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid >= UID_BASE:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


# -- paths -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path,reason",
    [
        ("../outside.py", "'..' is not allowed"),
        ("tests/../../etc/passwd", "'..' is not allowed"),
        ("/etc/passwd", "absolute path"),
        ("~/.bashrc", "absolute path"),
        ("", "empty path"),
        ("a\x00b", "NUL"),
    ],
)
def test_bad_paths_refused(tmp_path, path, reason):
    """'..', absolute, home and malformed paths are refused with the reason."""
    with pytest.raises(SandboxPathError, match=reason):
        resolve_in_sandbox(tmp_path, path)


def test_view_and_replace_refuse_escapes_with_clear_observation(tmp_path):
    """Tool calls naming paths outside the sandbox get a 'refused' observation, no effect."""
    outside = tmp_path / "secret.txt"
    outside.write_text("top secret")
    env = CodeRepairEnv(limits=FAST)
    env.reset(0)
    assert env.root is not None
    (env.root / "link").symlink_to(outside)
    (env.root / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    for action in (
        f"<tool>view {outside}</tool>",
        "<tool>view ../secret.txt</tool>",
        "<tool>view link</tool>",
        "<tool>view dirlink/secret.txt</tool>",
        "<tool>replace link\n<old>top</old>\n<new>pwned</new></tool>",
    ):
        res = env.step(action)
        assert res.observation.text.startswith("refused:"), action
        assert "top secret" not in res.observation.text
        assert res.info["error"] == "path refused"
    env.close()
    assert outside.read_text() == "top secret"


@pytest.fixture(scope="module")
def link_farm(tmp_path_factory):
    """A root with symlinks that point up and out, inside, and to themselves."""
    base = tmp_path_factory.mktemp("res")
    root = base / "root"
    (root / "a" / "b").mkdir(parents=True)
    for name, target in (("up", base), ("in", root / "a"), ("loop", root / "a" / "loop")):
        (root / "a" / name).symlink_to(target)
    (root / "out").symlink_to("/etc")
    return root


@settings(max_examples=150, deadline=None)
@given(
    parts=st.lists(
        st.sampled_from(["a", "b", "..", ".", "up", "loop", "in", "out", "/", "x.py"]),
        min_size=1,
        max_size=6,
    )
)
def test_resolved_paths_stay_inside(link_farm, parts):
    """Whatever the segments (symlinks out, up, in loops), a resolved path is inside root."""
    try:
        got = resolve_in_sandbox(link_farm, "/".join(parts))
    except SandboxPathError:
        return
    real_root = os.path.realpath(link_farm)
    assert str(got) == real_root or str(got).startswith(real_root + os.sep)


# -- code run by the tests ---------------------------------------------------------------


def test_network_access_refused():
    """Sockets (raw or via urllib) are refused with a clear message; the test fails."""
    res, _ = _attempt("import socket\ns = socket.socket()\ns.connect(('1.1.1.1', 80))")
    assert (
        res.reward == 0.0
        and "sandbox: network access (socket.__new__) refused" in res.observation.text
    )
    res, _ = _attempt(
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)"
    )
    assert "network access" in res.observation.text


def test_processes_refused_by_default():
    """os.fork, os.system and subprocess are refused under the default policy."""
    for body, what in (
        ("import os\nwhile True:\n    os.fork()", "os.fork"),
        ("import os\nos.system('echo hi')", "os.system"),
        ("import subprocess\nsubprocess.run(['ls'])", "_posixsubprocess"),
        ("import ctypes", "_ctypes"),
    ):
        res, _ = _attempt(body)
        assert "sandbox:" in res.observation.text and what in res.observation.text, body


def test_files_outside_refused(tmp_path):
    """Writing, deleting and reading outside the sandbox are refused; nothing changes."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = Path("/tmp") / f"pearl-escape-{uuid.uuid4().hex}"
    res, _ = _attempt(f"open({str(target)!r}, 'w').write('x')")
    assert "write outside the sandbox" in res.observation.text and not target.exists()
    res, _ = _attempt(f"import os\nos.remove({str(victim)!r})")
    assert "outside the sandbox" in res.observation.text and victim.read_text() == "keep me"
    res, _ = _attempt("print(open('/etc/hostname').read())")
    assert "access outside the sandbox: /etc/hostname" in res.observation.text


def test_runaway_output_is_cut_and_killed():
    """Endless printing is killed at the output limit; the observation stays small."""
    res, elapsed = _attempt("while True:\n    print('spam ' * 100)")
    text = res.observation.text
    assert "bytes of output dropped" in text and "run killed (output limit)" in text
    assert len(text) < FAST.max_output_bytes + 500 and res.info["killed"] == "output limit"
    assert elapsed < 30  # must not hang; generous on a loaded machine


def test_infinite_loop_is_killed():
    """A busy loop is stopped by the CPU limit or the wall-clock timeout."""
    res, elapsed = _attempt("while True:\n    pass", Limits(wall_timeout_s=2, cpu_time_s=1))
    assert res.info["killed"] in ("cpu limit", "timeout") and res.reward == 0.0
    assert "run killed" in res.observation.text
    # it must not hang; the limits above are what stop it (a tight wall bound flaked at
    # 4.003 s on a loaded 2-core CI machine)
    assert elapsed < 30


def test_the_cpu_limit_is_named_whatever_the_isolation():
    """A busy loop with a long wall bound is stopped by its CPU limit and reported as such.
    Under namespaces, unshare (util-linux 2.38) can fail to pass on a child's death by
    signal and exit 1 ("sigprocmask unblock failed"): the run then looked like a plain
    failure. The runner exits with the status of that signal instead."""
    res, elapsed = _attempt("while True:\n    pass", Limits(wall_timeout_s=20, cpu_time_s=1))
    assert res.info["killed"] == "cpu limit", res.observation.text
    assert "run killed (cpu limit)" in res.observation.text and res.reward == 0.0
    assert elapsed < 20


def test_memory_hog_and_huge_file_are_contained():
    """RLIMIT_AS turns a huge allocation into MemoryError; RLIMIT_FSIZE caps file writes."""
    res, _ = _attempt("x = bytearray(4 * 1024 ** 3)")
    assert "MemoryError" in res.observation.text
    res, _ = _attempt("open('big.bin', 'wb').write(b'x' * (8 * 2 ** 20))")
    assert "File too large" in res.observation.text


# -- OS layers, without the audit hook -----------------------------------------------------

OS_LIMITS = Limits(wall_timeout_s=15, cpu_time_s=5, max_processes=8, allow_subprocess=True)
BOMB_LIMITS = Limits(wall_timeout_s=2, cpu_time_s=1, max_processes=8, allow_subprocess=True)
needs_namespaces = pytest.mark.skipif(
    isolation().level == "none", reason="no namespaces on this machine (fallback level 'none')"
)
needs_nproc = pytest.mark.skipif(
    not isolation().drops_uid and os.geteuid() == 0,
    reason="root without a uid drop is exempt from RLIMIT_NPROC",
)

_CHILD = "import subprocess, sys\nr = subprocess.run(['python3', '-c', {code!r}], capture_output=True, text=True)\nprint(r.stdout, r.stderr[-300:])\n"


@needs_nproc
def test_fork_bomb_is_contained():
    """A real fork bomb hits RLIMIT_NPROC, is killed, and leaves no process behind."""
    bomb = """
        import os
        reported = False
        while True:
            try:
                os.fork()
            except OSError as err:
                if not reported:
                    print('fork refused:', err, flush=True)
                    reported = True
    """
    start = time.monotonic()
    res = _script(bomb, BOMB_LIMITS)
    assert time.monotonic() - start < BOMB_LIMITS.wall_timeout_s + 3
    assert res.killed_reason in ("timeout", "cpu limit")
    assert "fork refused: [Errno 11] Resource temporarily unavailable" in res.output
    deadline = time.monotonic() + 5  # killed processes may need a moment of CPU to exit
    while _sandbox_uid_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sandbox_uid_processes() == []


@needs_namespaces
def test_pid_namespace_hides_host_processes():
    """A hookless child sees only the sandbox's own processes (pid 1 is the sandbox's)."""
    code = "import os; print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
    res = _script(_CHILD.format(code=code), OS_LIMITS)
    line = next(ln for ln in res.output.splitlines() if "pids" in ln)
    pids = eval(line.split("pids", 1)[1].strip().split("]")[0] + "]")
    assert pids[0] == 1 and len(pids) <= OS_LIMITS.max_processes


def test_root_under_private_dir_is_a_caller_error(tmp_path):
    """A root the sandbox uid cannot reach is refused up front, not silently run."""
    if not isolation().drops_uid:
        pytest.skip("no uid drop here")
    root = tmp_path / "private" / "box"
    prepare_root(root)
    os.chmod(tmp_path / "private", 0o700)
    with pytest.raises(ValueError, match="cannot search"):
        run_in_sandbox(root, FAST)


@pytest.mark.parametrize("level", ["full", "userns", "none"])
def test_every_available_level_runs_and_contains(level):
    """Each isolation level that works here passes a good run, refuses network, times out."""
    iso = probe_level(level)
    if iso is None:
        pytest.skip(f"level '{level}' not available on this machine")
    assert iso.level == level
    res = _script("print('hello')", FAST, iso)
    assert res.all_passed and res.output == "hello\n" and res.isolation == level
    res = _script("import socket\nsocket.create_connection(('1.1.1.1', 80))", FAST, iso)
    assert "network access" in res.output and not res.all_passed
    if level != "none":  # the namespaces also stop a hook-free child
        code = "import socket; s = socket.socket(); s.settimeout(2); print('errno', s.connect_ex(('1.1.1.1', 80)))"
        res = _script(_CHILD.format(code=code), OS_LIMITS, iso)
        assert "errno" in res.output and "errno 0" not in res.output
        # ... and its writes to the shared temp dirs land in a private tmpfs, not the host's
        target = f"/tmp/pearl-escape-{uuid.uuid4().hex}"
        code = f"open({target!r}, 'w').write('x'); print('wrote')"
        res = _script(_CHILD.format(code=code), OS_LIMITS, iso)
        assert "wrote" in res.output and not os.path.exists(target)
    start = time.monotonic()
    res = _script("import time\ntime.sleep(60)", Limits(wall_timeout_s=1), iso)
    assert res.killed_reason == "timeout" and time.monotonic() - start < 4


def test_unknown_level_is_an_error():
    """Asking for a level that does not exist is a caller error."""
    with pytest.raises(ValueError, match="unknown isolation level"):
        probe_level("chroot")
