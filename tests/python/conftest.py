# SPDX-License-Identifier: MIT
"""Fixtures of the Python tests: a real ckptd (like tests/integration/lib.sh
starts it) and ranks launched as torchrun would (RANK, WORLD_SIZE, ...).

Environment (meson test sets it): CKPTD (the daemon), CKPT_LIBRARY (the
libckpt.so the package loads), PYTHONPATH (python/)."""

from __future__ import annotations

import os
import signal
import socket as _socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


class Daemon:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = tmp / "root"
        self.socket = str(tmp / "ckptd.sock")
        self.log = tmp / "ckptd.log"
        self.proc: subprocess.Popen | None = None

    def start(self, *extra: str) -> None:
        exe = os.environ.get("CKPTD")
        if not exe:
            pytest.fail("CKPTD must name the ckptd binary")
        self.root.mkdir(exist_ok=True)
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CKPTD_")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [exe, "--config", "", "--root", str(self.root), "--socket", self.socket,
                 "--log-level", "debug", "--metrics-listen", "127.0.0.1:0",
                 "--keep-last", "0", *extra],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        for _ in range(200):
            if os.path.exists(self.socket):
                return
            if self.proc.poll() is not None:
                pytest.fail(f"ckptd exited {self.proc.returncode} at start:\n{self.tail()}")
            time.sleep(0.05)
        pytest.fail("ckptd's socket did not appear within 10 s")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def job_dir(self, job: str) -> Path:
        return self.root / job

    def committed(self, job: str) -> list[int]:
        d = self.job_dir(job)
        if not d.is_dir():
            return []
        return sorted(int(p.name[5:]) for p in d.glob("step-*") if (p / "MANIFEST.json").exists())

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@pytest.fixture
def ckptd(tmp_path, monkeypatch):
    d = Daemon(tmp_path)
    d.start()
    monkeypatch.setenv("CKPT_SOCKET", d.socket)
    yield d
    d.stop()


def free_port() -> int:
    with _socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """`world` rank processes of one script, started as torchrun would."""

    def __init__(self, script: Path, args: list[str], world: int, daemon: Daemon, logdir: Path,
                 name: str):
        port = free_port()
        # The ranks meet through a file (gloo's FileStore), not a TCP port
        # another process may take between free_port() and the bind.
        rendezvous = logdir / f"{name}-{time.monotonic_ns()}.rdv"
        self.logs = [logdir / f"{name}-{r}.log" for r in range(world)]
        self.procs = []
        for r in range(world):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                       LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), CKPT_SOCKET=daemon.socket, OMP_NUM_THREADS="1",
                       CKPT_TEST_INIT=f"file://{rendezvous}")
            with open(self.logs[r], "wb") as log:
                self.procs.append(subprocess.Popen([sys.executable, str(script), *args],
                                                   stdout=log, stderr=subprocess.STDOUT,
                                                   env=env))

    def output(self) -> str:
        return "\n".join(f"--- {p.name} ---\n" + "\n".join(
            p.read_text(errors="replace").splitlines()[-40:]) for p in self.logs)

    def wait(self, timeout: float = 120) -> None:
        end = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill9()
                pytest.fail(f"ranks did not finish within {timeout} s\n{self.output()}")
        bad = [(i, p.returncode) for i, p in enumerate(self.procs) if p.returncode != 0]
        if bad:
            pytest.fail(f"ranks exited {bad}\n{self.output()}")

    def kill9(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait()


@pytest.fixture
def launch(ckptd, tmp_path):
    jobs: list[Job] = []

    def start(script: Path, args: list[str], world: int, name: str = "rank") -> Job:
        j = Job(script, args, world, ckptd, tmp_path, name)
        jobs.append(j)
        return j

    yield start
    for j in jobs:
        j.kill9()
