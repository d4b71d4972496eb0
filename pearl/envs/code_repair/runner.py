"""The in-sandbox test runner (executed as a script by `sandbox.py`, never imported for use).

It runs inside the sandbox process, before any model-written code, in this order:

1. read the one-line nonce from stdin (the parent's proof that a result line is ours);
2. lower the resource limits (RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, no core
   files), then drop to an unprivileged uid when the parent asks for one;
3. install an audit hook (PEP 578) that refuses network access, new processes (unless
   allowed), ctypes, raising limits, and file-system access outside the sandbox (reads are
   also allowed in the interpreter's own standard library);
4. run the tests: every ``test_*`` function of ``tests/test_*.py`` in file order and
   definition order, one ``PASS``/``FAIL`` line each with a short traceback restricted to
   files of the sandbox, then a summary; output is deterministic (no timings, no absolute
   paths);
5. print ``PEARL-RESULT <nonce> <passed> <failed>`` and exit 0 iff every test passed.

Written for any Python >= 3.8 (the sandbox may pick the system interpreter), stdlib only.
The audit hook is one layer of defence; the OS layers (network/pid namespaces, the uid
drop, rlimits, the parent's timeouts) do not depend on it.
"""

import json
import os
import sys

_REFUSED_PREFIXES = ("socket.", "ctypes.", "_ctypes.")
_PROCESS_EVENTS = {
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
    "os.kill",
    "os.killpg",
}
# modules whose functions start processes or call C without an audit event of their own
_REFUSED_IMPORTS = {"_posixsubprocess", "_ctypes"}
_WRITE_PATH_EVENTS = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.link": (0, 1),
    "os.symlink": (0, 1),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "os.chflags": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
    "shutil.rmtree": (0,),
    "shutil.copyfile": (1,),
    "shutil.copytree": (1,),
    "shutil.move": (0, 1),
    "os.chdir": (0,),
}
_READ_PATH_EVENTS = {"os.listdir": (0,), "os.scandir": (0,), "glob.glob": (0,)}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _exit_on_cpu_limit(signum, frame):
    # Exit with the status a SIGXCPU death reports (128 + signal) instead of dying of the
    # signal: util-linux's unshare (2.38) can fail to pass a child's death by signal on
    # ("unshare: sigprocmask unblock failed") and exit 1, which hid the CPU limit.
    os._exit(128 + signum)


def _set_limits(limits):
    import resource
    import signal

    cpu = int(limits["cpu_time_s"])
    signal.signal(signal.SIGXCPU, _exit_on_cpu_limit)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.get("nice"):
        os.nice(int(limits["nice"]))  # a runaway sandbox must not starve the machine
    if limits.get("nproc") is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"],) * 2)


def _private_tmp(root):
    """Hide the host's shared writable dirs behind fresh tmpfs mounts (own mount namespace only).

    The sandbox directory itself is bind-mounted back at /tmp/sandbox (through an fd opened
    before /tmp is covered), so the run sees only its project plus empty scratch dirs. Any
    failure leaves the mounts as they are (the other layers still hold); returns the root.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except Exception:
        return root
    ms_nosuid, ms_nodev, ms_bind = 2, 4, 4096
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for d in ("/tmp", "/var/tmp", "/dev/shm"):
            if os.path.isdir(d) and not os.path.islink(d):
                flags = ms_nosuid | ms_nodev
                if libc.mount(b"tmpfs", d.encode(), b"tmpfs", flags, b"size=16m,mode=1777") != 0:
                    return root if d == "/tmp" else "/tmp/sandbox"
            if d == "/tmp":
                os.mkdir("/tmp/sandbox", 0o700)
                src = ("/proc/self/fd/" + str(fd)).encode()
                if libc.mount(src, b"/tmp/sandbox", None, ms_bind, None) != 0:
                    raise OSError(ctypes.get_errno(), "bind mount of the sandbox failed")
        return "/tmp/sandbox"
    finally:
        os.close(fd)


def _drop_privileges(uid):
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _inside(path, roots):
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def _install_hook(root, allow_subprocess):
    read_roots = [root, "/dev/null", "/dev/urandom"]
    read_roots += [os.path.realpath(p) for p in sys.path if p]
    read_roots.append(os.path.realpath(os.path.dirname(os.__file__)))
    busy = []

    def refuse(what):
        raise PermissionError("sandbox: " + what + " refused")

    def resolve(arg):
        if isinstance(arg, int) or arg is None:
            return None
        try:
            p = os.fsdecode(os.fspath(arg))
        except TypeError:
            return None
        return os.path.realpath(os.path.join(os.getcwd(), p))

    def check(path, write, event):
        if path is None:
            return
        if not _inside(path, [root] if write else read_roots):
            kind = "write" if write else "access"
            refuse(event + " (" + kind + " outside the sandbox: " + path + ")")

    def hook(event, args):
        if busy:
            return
        busy.append(1)
        try:
            if event.startswith(_REFUSED_PREFIXES):
                if event.startswith("socket."):
                    refuse("network access (" + event + ")")
                refuse("ctypes (" + event + ")")
            if event in _PROCESS_EVENTS and not allow_subprocess:
                refuse("starting or signalling processes (" + event + ")")
            if event == "import" and args[0] in _REFUSED_IMPORTS:
                if args[0] != "_posixsubprocess" or not allow_subprocess:
                    refuse("import of " + args[0])
            if event == "resource.setrlimit":
                refuse("changing resource limits")
            if event == "open":
                path, mode, flags = args
                write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                    (flags or 0) & _WRITE_FLAGS
                )
                check(resolve(path), write, "open")
            elif event in _WRITE_PATH_EVENTS:
                for i in _WRITE_PATH_EVENTS[event]:
                    if i < len(args):
                        check(resolve(args[i]), True, event)
            elif event in _READ_PATH_EVENTS:
                for i in _READ_PATH_EVENTS[event]:
                    if i < len(args):
                        check(resolve(args[i]), False, event)
        finally:
            busy.pop()

    sys.addaudithook(hook)


def _short_tb(exc, root):
    import traceback

    lines = []
    for fr in traceback.extract_tb(exc.__traceback__):
        if fr.filename.startswith("<"):
            continue
        name = os.path.realpath(fr.filename)
        if _inside(name, [root]):
            rel = os.path.relpath(name, root)
            lines.append(
                "    " + rel + ":" + str(fr.lineno) + " in " + fr.name + ": " + (fr.line or "")
            )
    message = str(exc)
    if len(message) > 300:
        message = message[:300] + "..."
    head = type(exc).__name__ + (": " + message if message else "")
    return head, lines[-4:]


def _run_tests(root):
    import importlib.util

    passed = failed = 0
    test_dir = os.path.join(root, "tests")
    files = sorted(f for f in os.listdir(test_dir) if f.startswith("test_") and f.endswith(".py"))
    for fname in files:
        rel = "tests/" + fname
        spec = importlib.util.spec_from_file_location(
            "sandbox_" + fname[:-3], os.path.join(test_dir, fname)
        )
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: B036 (model code may raise anything)
            if isinstance(exc, KeyboardInterrupt):
                raise
            head, tb = _short_tb(exc, root)
            print("ERROR " + rel + " (import): " + head)
            for line in tb:
                print(line)
            failed += 1
            continue
        tests = [
            (v.__code__.co_firstlineno, k, v)
            for k, v in vars(module).items()
            if k.startswith("test_") and callable(v) and hasattr(v, "__code__")
        ]
        for _, name, fn in sorted(tests):
            try:
                fn()
            except BaseException as exc:  # noqa: B036
                if isinstance(exc, KeyboardInterrupt):
                    raise
                head, tb = _short_tb(exc, root)
                print("FAIL " + rel + "::" + name + ": " + head)
                for line in tb:
                    print(line)
                failed += 1
            else:
                print("PASS " + rel + "::" + name)
                passed += 1
    print("== " + str(passed) + " passed, " + str(failed) + " failed ==")
    return passed, failed


def main():
    cfg = json.loads(sys.argv[1])
    nonce = sys.stdin.readline().strip()
    sys.stdin.close()
    _set_limits(cfg["limits"])
    root = os.path.realpath(cfg["root"])
    if cfg.get("private_tmp"):
        root = _private_tmp(root)
        for name in [m for m in sys.modules if m.split(".")[0] in ("ctypes", "_ctypes")]:
            del sys.modules[name]  # so that model code importing ctypes meets the hook
    if cfg.get("uid") is not None:
        _drop_privileges(cfg["uid"])
    os.chdir(root)
    sys.path.insert(0, root)
    sys.dont_write_bytecode = True
    _install_hook(root, bool(cfg.get("allow_subprocess")))
    passed = failed = 0
    try:
        if cfg["mode"] == "probe":
            import importlib.util  # noqa: F401 (the imports a test run needs must work)
            import traceback  # noqa: F401

            passed = 1
            print("probe ok uid=" + str(os.getuid()))
        elif cfg["mode"] == "script":
            import runpy

            runpy.run_path(os.path.join(root, cfg["script"]), run_name="__main__")
            passed = 1
        else:
            passed, failed = _run_tests(root)
    except BaseException as exc:  # noqa: B036
        head, tb = _short_tb(exc, root)
        print("ERROR: " + head)
        for line in tb:
            print(line)
        failed += 1
    sys.stdout.flush()
    sys.stdout.write("PEARL-RESULT " + nonce + " " + str(passed) + " " + str(failed) + "\n")
    sys.stdout.flush()
    os._exit(0 if failed == 0 and passed > 0 else 1)


if __name__ == "__main__":
    main()
