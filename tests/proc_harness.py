"""Starting and stopping layerpipe processes for the Python tests and benchmarks.

A Process runs in its own session, so that killing its process group also ends whatever it started
(mpirun's ranks, `layerpipe cluster`'s workers). Its stdout is collected by a thread, so that a test can
wait for a line with a timeout; its stderr goes to a file, so that a failure can quote its tail.

Import it as pb_loader is imported: put this directory (tests/) on sys.path first.
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time


class ProcessError(AssertionError):
    """A process did not print what was waited for, or did not exit in time; the message quotes its output."""


class Process:
    """A process in its own session; stdout collected by a thread (`out`), stderr kept in a file.

    log_dir: where the stderr file goes (kept for reading after a run); None keeps it in an anonymous
    temporary file that disappears on close().
    env: the environment (default: this one). Unless it has LAYERPIPE_STATE_DIR (even empty), the process gets a
    fresh one of its own, removed on close(): a coordinator keeps its jobs in its default state directory,
    and two coordinators of one test (or of two tests running at once) must not share it. A test that
    restarts a coordinator on the same jobs passes --state-dir or LAYERPIPE_STATE_DIR itself.
    """

    def __init__(self, argv, name, log_dir=None, env=None):
        self.name = name
        env = dict(os.environ if env is None else env)
        self._state_dir = None
        if "LAYERPIPE_STATE_DIR" not in env:
            self._state_dir = tempfile.mkdtemp(prefix=f"layerpipe_state_{name}_")
            env["LAYERPIPE_STATE_DIR"] = self._state_dir
        if log_dir is None:
            self.log_path = None
            self._log = tempfile.TemporaryFile()
        else:
            self.log_path = os.path.join(log_dir, f"{name}.{time.monotonic_ns()}.err")
            self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log,
                                      start_new_session=True, env=env)
        self.out = bytearray()
        self._cond = threading.Condition()
        self._eof = False
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        fd = self.popen.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            with self._cond:
                if not chunk:
                    self._eof = True
                else:
                    self.out += chunk
                self._cond.notify_all()
            if not chunk:
                return

    @property
    def pid(self):
        return self.popen.pid

    def stdout_text(self):
        with self._cond:
            return bytes(self.out).decode(errors="replace")

    def wait_output(self, pred, timeout, what):
        """Waits until pred(stdout so far, bytes) is truthy and returns its value; timeout None waits until
        stdout closes. Raises ProcessError, quoting the output, when stdout closes or time runs out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                value = pred(bytes(self.out))
                if value:
                    return value
                left = None if deadline is None else deadline - time.monotonic()
                if self._eof or (left is not None and left <= 0):
                    break
                self._cond.wait(0.5 if left is None else min(left, 0.5))
        state = "exited" if self.popen.poll() is not None else "still running"
        within = "before its stdout closed" if timeout is None else f"within {timeout}s"
        raise ProcessError(f"{self.name} ({state}) did not print {what} {within}\n{self.tail()}")

    def wait_for(self, pattern, timeout):
        """The first match of the text regex `pattern` in stdout, waiting as wait_output does."""
        return self.wait_output(lambda out: re.search(pattern, out.decode(errors="replace")), timeout, f"/{pattern}/")

    def wait_listening(self, timeout):
        """The HOST:PORT of the "... listening on HOST:PORT" line every layerpipe server prints once serving."""
        return self.wait_for(r"listening on (\S+)", timeout).group(1)

    def stderr_text(self, start=0):
        """stderr from byte `start` on."""
        if self.log_path is not None:
            if not self._log.closed:
                self._log.flush()
            with open(self.log_path, "rb") as f:
                f.seek(start)
                return f.read().decode(errors="replace")
        fd = self._log.fileno()
        size = os.fstat(fd).st_size
        return os.pread(fd, max(size - start, 0), start).decode(errors="replace")

    def stderr_size(self):
        """Where stderr ends now: a `start` for stderr_text that skips what came before."""
        return os.fstat(self._log.fileno()).st_size if self.log_path is None else os.path.getsize(self.log_path)

    def wait_stderr(self, pattern, timeout):
        """The first match of `pattern` in stderr, polling the file for at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.stderr_text())
            if m:
                return m
            if time.monotonic() >= deadline:
                raise ProcessError(f"{self.name} did not print /{pattern}/ on stderr within {timeout}s\n{self.tail()}")
            time.sleep(0.05)

    def tail(self, n=30):
        """The last n lines of stdout then stderr, indented, for failure messages."""
        lines = (self.stdout_text() + self.stderr_text()).splitlines()
        return "\n".join(f"  | {line}" for line in lines[-n:])

    def wait(self, timeout):
        """The exit status, once stdout is read to the end; ProcessError if it runs past `timeout` seconds."""
        try:
            rc = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise ProcessError(f"{self.name} did not exit within {timeout}s\n{self.tail()}") from None
        self._reader.join(10)
        return rc

    def send_signal(self, sig):
        """sig to the process itself (not its group)."""
        self.popen.send_signal(sig)

    def kill_group(self, sig=signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def close(self):
        """SIGKILL to the whole group, then reaps the process; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self.kill_group()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)
        self._reader.join(5)
        self.popen.stdout.close()
        self._log.close()
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)


def small_checkpoint_argv(layerpipe, out, seed, max_positions=None, layers=6):
    """`layerpipe make-checkpoint` of the tiny model the cluster tests share: full attention on layers 2
    and 5 (full period 3), a sliding window of 8 (shorter than their prompts), a 512-id vocabulary."""
    argv = [layerpipe, "make-checkpoint", "--out", out, "--layers", str(layers), "--hidden", "64",
            "--intermediate", "128", "--vocab", "512", "--heads", "4", "--head-dim", "16", "--kv-heads", "2",
            "--global-head-dim", "32", "--global-kv-heads", "1", "--window", "8", "--full-period", "3",
            "--seed", str(seed)]
    if max_positions is not None:
        argv += ["--max-positions", str(max_positions)]
    return argv
