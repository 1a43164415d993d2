# SPDX-License-Identifier: MIT
"""Fixtures of the Python tests: a real ckptd (like tests/integration/lib.sh
starts it), a group of daemons as nodes of one cluster (like
tests/cluster/lib-cluster.sh starts them) and ranks launched as torchrun
would (RANK, WORLD_SIZE, ...).

Environment (meson test sets it): CKPTD (the daemon), CKPT_LIBRARY (the
libckpt.so the package loads), PYTHONPATH (python/)."""

from __future__ import annotations

import os
import random
import signal
import socket as _socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


class Daemon:
    def __init__(self, tmp: Path, *, root: Path | None = None, socket: Path | None = None,
                 name: str = "ckptd"):
        self.tmp = tmp
        self.name = name
        self.root = root if root is not None else tmp / "root"
        self.socket = str(socket if socket is not None else tmp / "ckptd.sock")
        self.log = tmp / f"{name}.log"
        self.port_file = tmp / f"{name}.metrics-port"
        self.proc: subprocess.Popen | None = None

    def start(self, *extra: str) -> None:
        exe = os.environ.get("CKPTD")
        if not exe:
            pytest.fail("CKPTD must name the ckptd binary")
        self.root.mkdir(parents=True, exist_ok=True)
        Path(self.socket).parent.mkdir(parents=True, exist_ok=True)
        for stale in (self.socket, self.port_file):
            if os.path.exists(stale):
                os.unlink(stale)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CKPTD_")}
        with open(self.log, "ab") as log:
            log.write(f"=== start {time.strftime('%T')}: {' '.join(extra)} ===\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [exe, "--config", "", "--root", str(self.root), "--socket", self.socket,
                 "--log-level", "debug", "--metrics-listen", "127.0.0.1:0",
                 "--metrics-port-file", str(self.port_file), "--keep-last", "0", *extra],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        for _ in range(300):
            if os.path.exists(self.socket) and self.port_file.exists() and \
                    self.port_file.stat().st_size > 0:
                return
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited {self.proc.returncode} at start:\n"
                            f"{self.tail()}")
            time.sleep(0.05)
        pytest.fail(f"{self.name}: socket {self.socket} or its metrics port did not appear "
                    "within 15 s")

    def metrics(self) -> str:
        """The daemon's /metrics text."""
        port = int(self.port_file.read_text().strip())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of metric `name`'s series whose labels include `labels`
        (0 when there is none), like lib-cluster.sh's metric."""
        want = {f'{k}="{v}"' for k, v in labels.items()}
        total = 0.0
        for line in self.metrics().splitlines():
            if not line or line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            base, _, rest = series.partition("{")
            if base != name:
                continue
            have = set(rest.rstrip("}").split(",")) if rest else set()
            if want <= have:
                total += float(value)
        return total

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

    def __init__(self, script: Path, args: list[str], world: int, daemon: Daemon | None,
                 logdir: Path, name: str, *, sockets: list[str] | None = None,
                 local_world: int | None = None):
        """Rank r connects to sockets[r] when given, else to daemon's socket;
        local_world: ranks per node (LOCAL_RANK, LOCAL_WORLD_SIZE)."""
        port = free_port()
        # The ranks meet through a file (gloo's FileStore), not a TCP port
        # another process may take between free_port() and the bind.
        rendezvous = logdir / f"{name}-{time.monotonic_ns()}.rdv"
        lw = local_world or world
        self.logs = [logdir / f"{name}-{r}.log" for r in range(world)]
        self.procs = []
        for r in range(world):
            sock = sockets[r] if sockets is not None else daemon.socket  # type: ignore[union-attr]
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r % lw),
                       LOCAL_WORLD_SIZE=str(lw), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), CKPT_SOCKET=sock, OMP_NUM_THREADS="1",
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


class Cluster:
    """`nodes` daemons on this machine as the nodes of one group, like
    tests/cluster/lib-cluster.sh: one shared root, node K's socket in its
    node-local directory node-K, a libfabric peer link (tcp;ofi_rxm) on
    127.0.0.1, a cluster id of its own. Rank r of a job runs on node
    r // ranks_per_node."""

    def __init__(self, tmp: Path, nodes: int, ranks_per_node: int, opts: list[str]):
        self.tmp = tmp
        self.root = tmp / "root"
        self.ranks_per_node = ranks_per_node
        self.cluster_id = f"py-{os.getpid()}-{random.randrange(1 << 30)}"
        self.opts = ["--nodes", str(nodes), "--cluster-id", self.cluster_id,
                     "--fabric-provider", "tcp;ofi_rxm", "--fabric-address", "127.0.0.1",
                     "--peer-timeout-ms", "2000", *opts]
        self.nodes = [Daemon(tmp, root=self.root, socket=self.node_dir(k) / "ckptd.sock",
                             name=f"ckptd-n{k}") for k in range(nodes)]

    def node_dir(self, k: int) -> Path:
        return self.tmp / f"node-{k}"

    def start(self, k: int, *extra: str) -> None:
        self.nodes[k].start("--node-index", str(k), *self.opts, *extra)

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def ranks_of(self, k: int) -> list[int]:
        return list(range(k * self.ranks_per_node, (k + 1) * self.ranks_per_node))

    def sockets(self, world: int) -> list[str]:
        return [self.nodes[self.node_of(r)].socket for r in range(world)]

    def wait_whole(self, timeout: float = 30) -> None:
        """Every daemon reports every other node up (ckpt_peer_up 1)."""
        end = time.monotonic() + timeout
        n = len(self.nodes)
        while True:
            try:
                if all(d.metric("ckpt_peer_up", node=str(j)) == 1
                       for k, d in enumerate(self.nodes) for j in range(n) if j != k):
                    return
            except OSError:
                pass
            for d in self.nodes:
                if d.proc is None or d.proc.poll() is not None:
                    pytest.fail(f"{d.name} is not running\n{d.tail()}")
            if time.monotonic() > end:
                pytest.fail(f"the group of {n} nodes was not whole within {timeout} s\n" +
                            "\n".join(d.tail(20) for d in self.nodes))
            time.sleep(0.25)

    def stop(self) -> None:
        for d in reversed(self.nodes):  # the leader (node 0) last
            d.stop()


@pytest.fixture
def cluster2(tmp_path):
    """Two daemons as two nodes, 2 ranks per node, each keeping its partner
    node's ranks' newest step in memory (--partner-memory, --partners 1)."""
    c = Cluster(tmp_path, 2, 2, ["--partner-memory", "64MiB", "--partners", "1"])
    for k in range(len(c.nodes)):
        c.start(k)
    c.wait_whole()
    yield c
    c.stop()


@pytest.fixture
def cluster_launch(cluster2, tmp_path):
    """start(script, args, world, name): a job whose rank r connects to its
    node's daemon."""
    jobs: list[Job] = []

    def start(script: Path, args: list[str], world: int, name: str = "rank") -> Job:
        j = Job(script, args, world, None, tmp_path, name, sockets=cluster2.sockets(world),
                local_world=cluster2.ranks_per_node)
        jobs.append(j)
        return j

    yield start
    for j in jobs:
        j.kill9()
