"""connrate.py server|client HOST PORT N: make bench-rdma's connection set-up
rate: N times connect, a 1-byte exchange, close; the client prints
"connections=N secs=S per_s=R cpu_ms=C" (C: the process's CPU time, all its
threads, user+system, per timed connection), then where the time went: each
call's median and mean in ms over the timed connections, and per thread
(/proc: name, CPU ms, minor faults and context switches per connection, and
the system call it was in at the end: 35 nanosleep is Go's sysmon, 281
epoll_pwait osf's engine, 202 futex an idle Go thread).
The server prints its cpu_ms and threads (from its first timed accept) too. The server prints "listening" once it listens.
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
import os
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


def cpu():
    """The process's CPU time so far (all threads), in seconds."""
    t = os.times()
    return t.user + t.system


def timed(name, rc):
    """Record the time a call returned."""
    calls.setdefault(name, []).append(time.monotonic())
    return rc


def tasks():
    """Each thread's name, CPU ticks, minor faults and context switches."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                st = f.read()
            with open(f"/proc/self/task/{tid}/status") as f:
                ctx = sum(int(x.split()[1]) for x in f if "ctxt_switches" in x)
        except OSError:
            continue
        try:
            with open(f"/proc/self/task/{tid}/syscall") as f:
                name = st[st.index("(") + 1:st.rindex(")")] + "@" + f.read().split()[0]
        except (OSError, IndexError):
            name = st[st.index("(") + 1:st.rindex(")")]
        f = st[st.rindex(")") + 2:].split()
        out[tid] = (name, int(f[11]) + int(f[12]), int(f[7]), ctx)
    return out


def print_tasks(before, n):
    """Print each thread's CPU ms, minor faults and context switches per
    connection since before (threads with any CPU time)."""
    hz = os.sysconf("SC_CLK_TCK")
    rows = []
    for tid, (name, cpu_t, flt, ctx) in sorted(tasks().items(), key=lambda kv: -kv[1][1]):
        b = before.get(tid, (name, 0, 0, 0))
        if cpu_t - b[1] > 0:
            rows.append(f"{tid}:{name} {(cpu_t - b[1]) * 1000 / hz / n:.1f}/{(flt - b[2]) / n:.0f}/{(ctx - b[3]) / n:.1f}")
    print("threads cpu_ms/faults/switches per conn: " + ", ".join(rows), flush=True)


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
    c0 = 0.0
    for i in range(n + 1):  # the warm-up and the timed ones
        c = timed("accept", ok(libc.accept(ls, None, None), "accept"))
        if i == 1:
            c0, t0 = cpu(), tasks()
        timed("recv", ok(libc.recv(c, buf, 1, 0), "recv"))
        timed("send", ok(libc.send(c, buf, 1, 0), "send"))
        timed("close", libc.close(c))
    for k in calls:  # not the warm-up
        del calls[k][0]
    print(f"cpu_ms={(cpu() - c0) * 1000 / n:.2f}")
    print_tasks(t0, n)
    print_calls(calls.pop("accept"))  # accept's wait is the client's time
else:
    t0, c0, k0, starts = 0.0, 0.0, {}, []
    for i in range(n + 1):
        if i == 1:  # after the warm-up
            t0, c0, k0 = time.monotonic(), cpu(), tasks()
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
    print(f"connections={n} secs={dt:.3f} per_s={n / dt:.2f} cpu_ms={(cpu() - c0) * 1000 / n:.2f}")
    print_calls(starts)
    print_tasks(k0, n)
