"""links.py: tests/rdmavm's streams on a link (OSF_RDMA_LINKS=1).

  links.py server ADDR PORT N
      Serves N connections on ADDR:PORT at once: each is read to its end
      and the SHA-256 of what came is sent back; a connection reset by
      its client is counted. Prints "served N reset R".
  links.py client ADDR PORT N MIB
      Opens N connections to ADDR:PORT and one more, which it resets
      (SO_LINGER 0) after a first write while the others run; prints the
      RC queue pairs this process holds ("qps Q", from `rdma res show
      qp`), then forks: the child sends on the last connection, the
      parent's threads on the others (MIB MiB each, a pattern of its own);
      each shuts down writing and checks the SHA-256 that comes back.
      Prints "parent ok|bad child ok|bad".
  links.py hold ADDR PORT N
      The qp row of make bench-rdma: the server (on ADDR) accepts N
      connections and holds them until each ends; the client opens N
      connections at once, and both print the RC queue pairs this process
      holds with them open ("qps Q conns N secs S", S: the client's time
      to open them), then the client closes them.
  links.py streamers ADDR PORT N
      Accepts N connections and sends a pattern on each without pause;
      a "K" read on any of them SIGKILLs the process.
  links.py watchers ADDR PORT N
      Opens N connections to a streamers server, reads 1 MiB from each,
      sends "K" on the first, then reads each until end of file or an
      error; prints "results R1 R2 ..." (ECONNRESET, EOF, TIMEOUT...)."""
import errno
import hashlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time


def server(addr, port, n):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(64)
    print("listening", flush=True)
    resets = []

    def serve(c):
        h = hashlib.sha256()
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                h.update(b)
            c.sendall(h.digest())
        except ConnectionResetError:
            resets.append(1)
        c.close()

    ts = []
    for _ in range(n + 1):
        c, _ = ls.accept()
        t = threading.Thread(target=serve, args=(c,))
        t.start()
        ts.append(t)
    for t in ts:
        t.join()
    print("served", n, "reset", len(resets), flush=True)


def qps():
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    out = subprocess.run(["rdma", "res", "show", "qp"], env=env, capture_output=True, text=True).stdout
    # the kernel names the thread that made a QP (the engine's), not the process
    tids = set(os.listdir(f"/proc/{os.getpid()}/task"))
    n = 0
    for line in out.splitlines():
        m = re.search(r"\bpid (\d+)\b", line)
        if m and m.group(1) in tids and "type RC" in line:
            n += 1
    if n == 0:
        print(f"rdma res show qp (threads {sorted(tids)}):\n{out}", file=sys.stderr, flush=True)
    return n


def client(addr, port, n, mib):
    cs = [socket.create_connection((addr, port), timeout=120) for _ in range(n)]
    for c in cs:
        c.settimeout(None)
    r = socket.create_connection((addr, port), timeout=120)
    r.sendall(b"x" * 65536)
    print("qps", qps(), flush=True)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    r.close()

    def run(i):
        data = bytes((j * 7 + i * 13) & 0xFF for j in range(65536)) * (16 * mib)
        c = cs[i]
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        got = b""
        while len(got) < 32:
            b = c.recv(32 - len(got))
            if not b:
                break
            got += b
        return got == hashlib.sha256(data).digest()

    pid = os.fork()
    if pid == 0:
        os._exit(0 if run(n - 1) else 1)
    res = [False] * (n - 1)

    def th(i):
        res[i] = run(i)

    ts = [threading.Thread(target=th, args=(i,)) for i in range(n - 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    _, st = os.waitpid(pid, 0)
    print("parent", "ok" if all(res) else "bad", "child", "ok" if st == 0 else "bad", flush=True)


def hold(addr, port, n, serve):
    if serve:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(n)
        print("listening", flush=True)
        cs = [ls.accept()[0] for _ in range(n)]
        print("qps", qps(), "conns", n, flush=True)
        for c in cs:
            c.recv(1)
            c.close()
        return
    t0 = time.time()
    cs = [socket.create_connection((addr, port), timeout=120) for _ in range(n)]
    secs = time.time() - t0
    print("qps", qps(), "conns", n, "secs", round(secs, 2), flush=True)
    for c in cs:
        c.close()


def streamers(addr, port, n):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(n)
    print("listening", flush=True)
    cs = [ls.accept()[0] for _ in range(n)]
    chunk = bytes(range(256)) * 256

    def send(c):
        try:
            while True:
                c.sendall(chunk)
        except OSError:
            pass

    def watch(c):
        try:
            if c.recv(1) == b"K":
                os.kill(os.getpid(), signal.SIGKILL)
        except OSError:
            pass

    ts = [threading.Thread(target=f, args=(c,), daemon=True) for c in cs for f in (send, watch)]
    for t in ts:
        t.start()
    time.sleep(300)


def watchers(addr, port, n):
    cs = [socket.create_connection((addr, port), timeout=120) for _ in range(n)]
    for c in cs:
        got = 0
        while got < 1 << 20:
            b = c.recv(65536)
            if not b:
                break
            got += len(b)
    cs[0].sendall(b"K")
    res = [""] * n

    def drain(i):
        c = cs[i]
        c.settimeout(120)
        res[i] = "TIMEOUT"
        try:
            while c.recv(1 << 16):
                pass
            res[i] = "EOF"
        except socket.timeout:
            pass
        except OSError as e:
            res[i] = errno.errorcode.get(e.errno, str(e.errno))

    ts = [threading.Thread(target=drain, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("results", *res, flush=True)


if __name__ == "__main__":
    what, addr, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if what == "server":
        server(addr, port, n)
    elif what == "hold-server":
        hold(addr, port, n, True)
    elif what == "hold":
        hold(addr, port, n, False)
    elif what == "streamers":
        streamers(addr, port, n)
    elif what == "watchers":
        watchers(addr, port, n)
    else:
        client(addr, port, n, int(sys.argv[5]))
