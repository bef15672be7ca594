"""The sandbox supervisor: the program of the child interpreter (`python -I -S -c <this file's text>`).

Read as text by `evaluation.sandbox` and passed on the command line; never imported for its effects (importing
it only defines names). It starts as root (in fresh namespaces when available), sets up the filesystem, forks
the user process, waits for it as PID 1 and writes one status line ("exit N CPU" | "signal N CPU" |
"setup MESSAGE") to a pipe that only it holds. It must stay cheap to start: no json/re/socket imports here.

argv: mode workdir uid status_fd memory_mb cpu_s fsize_mb nproc workdir_mb hidden keep site_dirs [user args...]
"""
import ctypes
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC = 32, 4096, 8192, 16384
PR_SET_NO_NEW_PRIVS = 38
libc = ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype, flags, data=None):
    def enc(s):
        return None if s is None else s.encode()

    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def under(path, top):
    return path == top or path.startswith(top.rstrip("/") + "/")


def cover(top, keep, scratch):
    """Replace `top` by an empty tmpfs that holds only the `keep` subtrees, at their old paths. The tmpfs is
    built on `scratch` (an existing folder outside `top`'s kept subtrees), then moved over `top` whole, so a kept
    subtree never depends on a path that the cover has already removed."""
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in keep:
        spot = os.path.join(scratch, os.path.relpath(path, top))
        os.makedirs(spot, mode=0o755, exist_ok=True)
        mount(path, spot, None, MS_BIND | MS_REC)
    mount(scratch, top, None, MS_MOVE)


def isolate_filesystem(workdir, uid, size_mb, hidden, keep):
    # The caller's files sit in the host's temp dir; read them before a cover hides it.
    files = {}
    for root, _, names in os.walk(workdir):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, workdir)] = f.read()
    for top in hidden:  # no two nested (the host keeps the outermost); the workdir is each cover's scratch
        os.makedirs(workdir, mode=0o700, exist_ok=True)  # again after a cover of its parent (/tmp) removed it
        cover(top, [k for k in keep if under(k, top)], workdir)
    os.makedirs(workdir, mode=0o700, exist_ok=True)
    mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mb}m,mode=0700,uid={uid},gid={uid}")
    # Everything but the workdir read-only and nosuid (setuid binaries would be a way back to root).
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4:6] for line in f]
    for target, options in mounts:
        for escaped, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
            target = target.replace(escaped, char)  # mountinfo escapes these as octal
        if target == workdir or under(target, "/proc"):
            continue
        options = options.split(",")
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
        flags |= (MS_NODEV if "nodev" in options else 0) | (MS_NOEXEC if "noexec" in options else 0)
        mount(None, target, None, flags)
    for rel, data in files.items():
        path = os.path.join(workdir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        os.chown(path, uid, uid)


def enter_sandbox(mode, workdir, uid, memory_mb, cpu_s, fsize_mb, nproc):
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_mb << 20, fsize_mb << 20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))  # SIGXCPU first, SIGKILL a second later
    if mode != "plain":
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise OSError("could not drop root")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    os.chdir(workdir)
    os.umask(0o077)
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))  # last: setup allocates


def guard_sockets():
    # Belt and braces behind the empty network namespace: sockets refuse to connect, bind or send.
    import _socket

    class NoNetworkSocket(_socket.socket):
        __slots__ = ()  # socket.socket, which subclasses this, declares __weakref__ itself

        def _deny(self, *args, **kwargs):
            raise PermissionError(13, "network access is disabled in the sandbox")
        connect = connect_ex = bind = sendto = _deny

    def no_dns(*args, **kwargs):
        raise PermissionError(13, "network access is disabled in the sandbox")

    _socket.socket = _socket.SocketType = NoNetworkSocket
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
        setattr(_socket, name, no_dns)


def run_user_code(workdir, args, site_dirs):
    import builtins

    def exit(code=None):  # `python -S` skips site.py, which is what defines exit() and quit()
        raise SystemExit(code)

    builtins.exit = builtins.quit = exit
    path = os.path.join(workdir, "main.py")
    sys.argv = [path, *args]
    sys.path[:0] = [workdir]
    sys.path += site_dirs
    module = type(sys)("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec")
        exec(code, module.__dict__)
        status = 0
    except SystemExit as e:
        status = e.code
    except BaseException as e:  # print it as the interpreter would, minus this frame
        try:
            import traceback
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        except BaseException:  # e.g. no memory left to format it
            os.write(2, type(e).__name__.encode() + b"\n")
        status = 1
    finish(status)


def finish(status):
    """Exit as the interpreter would (threads, atexit, flush), minus the slow module teardown."""
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()  # waits for non-daemon threads
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    if status is None:
        status = 0
    elif not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status & 0xFF)


def report(fd, line):
    os.write(fd, (line + "\n").encode())


def main():
    (mode, workdir, uid, status_fd, memory_mb, cpu_s, fsize_mb, nproc, workdir_mb,
     hidden, keep, site_dirs), args = sys.argv[1:13], sys.argv[13:]
    uid, status_fd = int(uid), int(status_fd)

    def split(s):
        return [p for p in s.split(os.pathsep) if p]

    try:
        if mode == "namespaces":
            isolate_filesystem(workdir, uid, int(workdir_mb), split(hidden), split(keep))
        pid = os.fork()
    except Exception as e:
        report(status_fd, f"setup {type(e).__name__}: {e}")
        return
    if pid == 0:
        try:
            guard_sockets()  # first: loading _socket may need root to read the stdlib
            enter_sandbox(mode, workdir, uid, int(memory_mb), int(cpu_s), int(fsize_mb), int(nproc))
        except Exception as e:  # never run user code half-isolated
            report(status_fd, f"setup {type(e).__name__}: {e}")
            os._exit(121)
        os.close(status_fd)
        run_user_code(workdir, args, split(site_dirs))
    # Reap everything (orphans re-parent to PID 1) until the user process itself has ended.
    while True:
        child, status, usage = os.wait4(-1, 0)
        if child == pid:
            break
    cpu = usage.ru_utime + usage.ru_stime
    if os.WIFSIGNALED(status):
        report(status_fd, f"signal {os.WTERMSIG(status)} {cpu:.3f}")
    else:
        report(status_fd, f"exit {os.WEXITSTATUS(status)} {cpu:.3f}")
    os._exit(0)  # nothing to clean up; the kernel takes down the namespace


if __name__ == "__main__":
    main()
