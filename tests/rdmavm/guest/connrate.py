"""connrate.py server|client HOST PORT N: make bench-rdma's connection set-up
rate: N times connect, a 1-byte exchange, close; the client prints
"connections=N secs=S per_s=R", then where the time went: each call's
median and mean in ms over the timed connections. The server prints "listening" once it listens.
One more connection before the timed ones warms up (it is not counted): a
process's first connection also loads what the transport needs (osf's core,
its device and first spare; rsocket's device), which is not a set-up rate.

Every socket call goes to libc through ctypes: Python's socket module makes
its sockets with SOCK_CLOEXEC and accepts with accept4, and rsocket's preload
library (librspreload) turns a socket type with flags into a kernel TCP
socket and has no accept4, so the rsocket column would measure the kernel.
"""
import ctypes
import errno
import socket
import struct
import sys
import time

mode, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
# struct sockaddr_in: family in host order, port and address in network order
sin = struct.pack("=H", socket.AF_INET) + struct.pack("!H4s8x", port, socket.inet_aton(host))
buf = ctypes.create_string_buffer(1)


def ok(rc, what):
    if rc < 0:
        e = ctypes.get_errno()
        sys.exit(f"connrate: {what}: {errno.errorcode.get(e, e)}")
    return rc


calls = {}


def timed(name, rc):
    """Record the time a call returned."""
    calls.setdefault(name, []).append(time.monotonic())
    return rc


def print_calls(firsts):
    """Print each call's median and mean time in ms: its return minus the
    previous call's (the first call's: minus firsts)."""
    prev, laps = firsts, []
    for name, ends in calls.items():
        d = sorted((e - p) * 1000 for e, p in zip(ends, prev))
        laps.append(f"{name} {d[len(d) // 2]:.2f}/{sum(d) / len(d):.2f}")
        prev = ends
    print("median/mean ms: " + ", ".join(laps), flush=True)


if mode == "server":
    ls = ok(libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0), "socket")
    one = ctypes.c_int(1)
    ok(libc.setsockopt(ls, socket.SOL_SOCKET, socket.SO_REUSEADDR, ctypes.byref(one), 4), "setsockopt")
    ok(libc.bind(ls, sin, len(sin)), "bind")
    ok(libc.listen(ls, 128), "listen")
    print("listening", flush=True)
    for _ in range(n + 1):  # the warm-up and the timed ones
        c = timed("accept", ok(libc.accept(ls, None, None), "accept"))
        timed("recv", ok(libc.recv(c, buf, 1, 0), "recv"))
        timed("send", ok(libc.send(c, buf, 1, 0), "send"))
        timed("close", libc.close(c))
    for k in calls:  # not the warm-up
        del calls[k][0]
    print_calls(calls.pop("accept"))  # accept's wait is the client's time
else:
    t0, starts = 0.0, []
    for i in range(n + 1):
        if i == 1:  # after the warm-up
            t0 = time.monotonic()
            calls.clear()
            starts.clear()
        starts.append(time.monotonic())
        c = timed("socket", ok(libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0), "socket"))
        timed("connect", ok(libc.connect(c, sin, len(sin)), "connect"))
        timed("send", ok(libc.send(c, b"x", 1, 0), "send"))
        if timed("recv", ok(libc.recv(c, buf, 1, 0), "recv")) != 1 or buf.raw != b"x":
            sys.exit("connrate: bad echo")
        timed("close", libc.close(c))
    dt = time.monotonic() - t0
    print(f"connections={n} secs={dt:.3f} per_s={n / dt:.2f}")
    print_calls(starts)
