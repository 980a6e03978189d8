"""A TVM RPC tracker and servers on the loopback address, for the RPC studies and tests.

    with loopback_devices(8, key="sim", threads=1) as (port, servers):
        ...  # --rpc 127.0.0.1:PORT:sim

Each process is started in a session of its own (so :func:`kill` takes its children too) with
``TVM_NUM_THREADS`` set; the context waits until ``n`` servers have registered.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Iterator


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(*args: str, threads: int = 2) -> subprocess.Popen:
    """``python -m ARGS`` in a session of its own, on ``threads`` TVM threads, its output dropped."""
    env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
    return subprocess.Popen([sys.executable, "-m", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def spawn_server(port: int, key: str, threads: int = 2) -> subprocess.Popen:
    """An RPC server registering with the tracker at ``127.0.0.1:port`` under ``key``."""
    sport = free_port()
    return spawn("tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{port}", "--key", key, "--host", "127.0.0.1",
                 "--port", str(sport), "--port-end", str(sport + 50), threads=threads)


def servers_up(port: int, key: str, n: int, timeout: float = 120.0) -> None:
    """Wait until ``n`` servers of ``key`` are registered with the tracker (RuntimeError if not)."""
    from tvm import rpc

    end = time.time() + timeout
    while time.time() < end:
        try:
            info = rpc.connect_tracker("127.0.0.1", port).summary().get("server_info", [])
            if sum(1 for s in info if str(s.get("key", "")).endswith(key)) >= n:
                return
        except Exception:  # noqa: BLE001 - the tracker is still starting
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{n} servers did not register with the tracker")


def kill(p: subprocess.Popen) -> None:
    """Kill a spawned process and everything it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


@contextlib.contextmanager
def loopback_devices(n: int, key: str, threads: int = 2) -> Iterator[tuple[int, list[subprocess.Popen]]]:
    """A tracker and ``n`` servers of ``key``: yields (the tracker's port, the server processes)."""
    port = free_port()
    tracker = spawn("tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1))
    servers: list[subprocess.Popen] = []
    try:
        time.sleep(1.0)
        servers.extend(spawn_server(port, key, threads) for _ in range(n))
        servers_up(port, key, n)
        yield port, servers
    finally:
        for p in servers + [tracker]:
            kill(p)
