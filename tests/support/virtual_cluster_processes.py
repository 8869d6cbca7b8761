"""The processes a virtual cluster starts in its hosts, kept by PID so that only they are ever signalled."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .virtual_network import Host, VirtualClusterError, host_command, host_environment

__all__ = ["STOP_TIMEOUT_S", "HostProcesses", "StartedProcess"]

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0


@dataclass
class StartedProcess:
    """A process started in a host: the host's name, a role label, the Popen, its log file if any."""

    host: str
    role: str
    process: subprocess.Popen
    log: Path | None


class HostProcesses:
    """Starts, runs and stops processes inside hosts; remembers every one it started.

    Parameters
    ----------
    work_dir : Path
        Processes run in ``work_dir/<host>`` unless told otherwise.
    """

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.started: list[StartedProcess] = []

    def start(self, host: Host, argv: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
              log: Path | None = None, role: str = "process", cwd: str | os.PathLike | None = None,
              **popen_kwargs: Any) -> StartedProcess:
        """Start ``argv`` inside ``host`` (stdout and stderr appended to ``log`` when given)."""
        handle = open(log, "ab") if log else None
        if handle is not None:
            popen_kwargs.update(stdout=handle, stderr=subprocess.STDOUT)
        popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
        try:
            process = subprocess.Popen(host_command(host, [os.fspath(arg) for arg in argv]),
                                       env=host_environment(host, env), cwd=cwd or self.work_dir / host.name,
                                       **popen_kwargs)
        finally:
            if handle is not None:
                handle.close()  # the child has its own copy
        started = StartedProcess(host.name, role, process, log)
        self.started.append(started)
        logger.info("%s on %s: PID %d", role, host.name, process.pid)
        return started

    def run(self, host: Host, argv: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
            timeout_s: float = 60.0, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``argv`` inside ``host`` to its end, stdout and stderr captured as text.

        Raises
        ------
        VirtualClusterError
            ``check`` and a non-zero exit (the message carries stderr), or ``timeout_s`` passed.
        """
        words = [os.fspath(arg) for arg in argv]
        try:
            done = subprocess.run(host_command(host, words), env=host_environment(host, env),
                                  cwd=self.work_dir / host.name, capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            raise VirtualClusterError(f"{' '.join(words)} on {host.name} did not end within {timeout_s:.0f} s") from exc
        if check and done.returncode != 0:
            raise VirtualClusterError(f"{' '.join(words)} on {host.name} exited with {done.returncode}: "
                                      f"{done.stderr[-2000:]}")
        return done

    def stop(self, process: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM a process started here, SIGKILL it after ``timeout_s``; its exit status."""
        if not any(started.process is process for started in self.started):
            raise VirtualClusterError(f"PID {process.pid} was not started by this virtual cluster")
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning("PID %d ignored SIGTERM for %.0f s; killing it", process.pid, timeout_s)
                process.kill()
                process.wait()
        return process.returncode

    def stop_all(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every live process started here at once, SIGKILL those still running after ``timeout_s``."""
        alive = [started.process for started in reversed(self.started) if started.process.poll() is None]
        for process in alive:
            process.terminate()
        deadline = time.monotonic() + timeout_s  # one grace period for all: they got the signal together
        for process in alive:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("PID %d ignored SIGTERM for %.0f s; killing it", process.pid, timeout_s)
                process.kill()
                process.wait()

    def reap(self, host: str | None = None) -> None:
        """Collect the exit status of the processes started in ``host`` (all hosts: None), all of them killed."""
        for started in self.started:
            if host is None or started.host == host:
                started.process.wait(timeout=STOP_TIMEOUT_S)
