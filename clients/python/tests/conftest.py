"""Shared test helpers: a bounded event loop run, condition waits, the real
agent binary, and a fake /clock server in-process."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from skewscope_clock import reply_tag, time_key

PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: Every test's event loop is bounded: a hang fails, it does not stall the run.
TEST_TIMEOUT = 60.0


def run(coro, timeout: float = TEST_TIMEOUT):
    """Runs ``coro`` on a new event loop, failing it after ``timeout`` seconds."""

    async def bounded():
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


async def wait_until(condition, timeout: float, what: str, step: float = 0.01) -> None:
    """Awaits ``condition()`` becoming true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(step)


def agent_binary() -> Path:
    """The agent to test against: $SKEWSCOPE_AGENT, else the workspace's debug build."""
    env = os.environ.get("SKEWSCOPE_AGENT")
    path = Path(env) if env else (PACKAGE_DIR / ".." / ".." / "target" / "debug" / "skewscope-agent").resolve()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"the skewscope agent binary is missing: {path} "
            "(build it with `cargo build -p skewscope-agent`, or set SKEWSCOPE_AGENT to one); "
            "these tests run against the real agent and do not skip",
            pytrace=False,
        )
    return path


def private_ca(workdir: Path) -> tuple[Path, Path, Path]:
    """A site's own CA and a server certificate it signed for localhost and
    127.0.0.1, made with the openssl command as docs/deploying.md shows:
    (ca.pem, server.pem, server.key)."""
    ca_key, ca, key, csr, cert = (workdir / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ext = workdir / "server.ext"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n", encoding="utf-8")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for args in (
        ["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-subj", "/CN=test site CA", "-days", "2"],
        ["req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=localhost"],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext],
    ):
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)
    return ca, cert, key


class Agent:
    """A running ``skewscope-agent`` on a loopback port picked by the kernel."""

    def __init__(self, workdir: Path, token: str | None, tls: bool = False):
        self.token = token
        args = [str(agent_binary()), "--listen", "127.0.0.1:0", "--data-dir", str(workdir / "data")]
        if token is not None:
            token_file = workdir / "token"
            token_file.write_text(token + "\n", encoding="utf-8")
            args += ["--token-file", str(token_file)]
        self.ca = None
        if tls:
            self.ca, cert, key = private_ca(workdir)
            args += ["--tls-cert", str(cert), "--tls-key", str(key)]
        self.stderr_path = workdir / "agent.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL)
        try:
            self.addr = self._read_address(timeout=60.0)
        except BaseException:
            self.stop()
            raise
        # By address, which the certificate carries: a fresh Debian root may
        # not resolve `localhost`.
        self.url = f"{'wss' if tls else 'ws'}://{self.addr}/clock"

    def _read_address(self, timeout: float) -> str:
        """The first stdout line, `listening on HOST:PORT`, within ``timeout``."""
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"the agent did not say where it listens within {timeout} s: {self._stderr_text()}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            byte = os.read(self.proc.stdout.fileno(), 1)
            if not byte:
                pytest.fail(f"the agent exited ({self.proc.wait()}) before listening: {self._stderr_text()}")
            line += byte
        text = line.decode().strip()
        if not text.startswith("listening on "):
            pytest.fail(f"the agent's first line is not `listening on HOST:PORT`: {text!r}")
        return text.removeprefix("listening on ")

    def _stderr_text(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        """SIGTERM, and waits for it (killed if it does not stop in 30 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self._stderr.close()


@pytest.fixture(scope="session")
def agent(tmp_path_factory):
    """The real agent, without a token."""
    a = Agent(tmp_path_factory.mktemp("agent"), token=None)
    yield a
    a.stop()


@pytest.fixture(scope="session")
def tls_agent(tmp_path_factory):
    """The real agent with a token and --tls-cert from a private CA
    (``.ca``): ``wss://`` only."""
    a = Agent(tmp_path_factory.mktemp("tls-agent"), token="test-site-secret", tls=True)
    yield a
    a.stop()


@pytest.fixture(scope="session")
def keyed_agent(tmp_path_factory):
    """The real agent with a --token-file."""
    a = Agent(tmp_path_factory.mktemp("keyed-agent"), token="test-site-secret")
    yield a
    a.stop()


def agent_reply(request_text: str, t2_ns: int, t3_ns: int, key: bytes | None, tag_times=None) -> dict:
    """A reply as the agent writes it (core/src/time_exchange/json.rs); with
    ``tag_times`` the tag is that of other times (an altered reply)."""
    request = json.loads(request_text)
    reply = {
        "id": request["id"],
        "t1": request["t1"],
        "t2": t2_ns / 1e6,
        "t3": t3_ns / 1e6,
        "t2_ns": t2_ns,
        "t3_ns": t3_ns,
    }
    if key is not None:
        tagged = tag_times or (t2_ns, t3_ns)
        reply["auth"] = {
            "t2_ns": str(t2_ns),
            "t3_ns": str(t3_ns),
            "tag": reply_tag(key, request_text, str(tagged[0]), str(tagged[1])),
        }
    return reply


class FakeClockServer:
    """Answers /clock as the agent does, tagging under ``token``; every other
    reply is altered on the way (t2 and t3 moved 3 ms later in both the plain
    and the tagged fields, the tag left as it was). Of the altered ones,
    every second is followed by the genuine reply (a forgery racing the
    real one); the others replace it."""

    SHIFT_NS = 3_000_000

    def __init__(self, token: str):
        self.key = time_key(token)
        self.requests: list[str] = []
        self.genuine_t2: set[int] = set()
        self.altered_t2: set[int] = set()
        #: Genuine replies that came right after a forgery.
        self.raced_t2: set[int] = set()

    async def handler(self, ws) -> None:
        async for text in ws:
            t2 = time.time_ns()
            self.requests.append(text)
            n = len(self.requests)
            t3 = time.time_ns()
            genuine = json.dumps(agent_reply(text, t2, t3, self.key))
            if n % 2 == 1:
                moved = (t2 + self.SHIFT_NS, t3 + self.SHIFT_NS)
                self.altered_t2.add(moved[0])
                await ws.send(json.dumps(agent_reply(text, *moved, self.key, tag_times=(t2, t3))))
                if n % 4 == 3:
                    self.genuine_t2.add(t2)
                    self.raced_t2.add(t2)
                    await ws.send(genuine)
            else:
                self.genuine_t2.add(t2)
                await ws.send(genuine)
