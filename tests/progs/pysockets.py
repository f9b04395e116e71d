# pysockets.py: Python's socket APIs over TCP on loopback, both ends in this
# process (TestPythonSocketAPIs): asyncio streams with 50 clients, the
# loop.sock_* calls, socket.sendfile and makefile, and an echo server on each
# selectors class (epoll, poll, select) with 20 clients. Every transfer is
# checked byte for byte; one line "NAME ok True|False" per check, then
# "transports T..." naming where the kernel lists the sockets: unix
# (offloaded by osf), kfd (a TCP socket osf offloads, OSF_SHM_KFD=1: its
# qsock_readable sets a cookie) or tcp.
import asyncio, ctypes, hashlib, os, selectors, socket, sys, threading, tempfile, time

_qsock = getattr(ctypes.CDLL(None), "qsock_readable", None)

def offloaded(s):
    if _qsock is None:
        return False
    cookie = ctypes.c_void_p()
    _qsock(s.fileno(), ctypes.byref(cookie))
    return bool(cookie.value)

def transport(s):
    ino = os.readlink(f"/proc/self/fd/{s.fileno()}")[8:-1]
    for path, f in (("/proc/net/unix", 6), ("/proc/net/tcp", 9), ("/proc/net/tcp6", 9)):
        with open(path) as fh:
            next(fh)
            for l in fh:
                p = l.split()
                if len(p) > f and p[f] == ino:
                    if "unix" in path:
                        return "unix"
                    return "kfd" if offloaded(s) else "tcp"
    return "none"

seen = set()
def note(s):
    seen.add(transport(s))

def data(n, seed):
    h = hashlib.sha256(str(seed).encode()).digest()
    return (h * (n // 32 + 1))[:n]

def listener():
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", 0)); l.listen(128)
    return l

# 1. asyncio streams echo, 50 clients
async def streams():
    async def handle(r, w):
        note(w.get_extra_info("socket"))
        while True:
            b = await r.read(65536)
            if not b: break
            w.write(b); await w.drain()
        w.close()
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    async def client(i):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        note(w.get_extra_info("socket"))
        d = data(200000 + i * 1000, i)
        async def wr():
            w.write(d); await w.drain(); w.write_eof()
        t = asyncio.ensure_future(wr())
        got = b""
        while True:
            b = await r.read(65536)
            if not b: break
            got += b
        await t; w.close()
        return hashlib.sha256(got).digest() == hashlib.sha256(d).digest()
    res = await asyncio.gather(*[client(i) for i in range(50)])
    srv.close(); await srv.wait_closed()
    return all(res)
print("asyncio streams 50 clients ok", asyncio.run(streams()))

# 2. loop.sock_* APIs
async def sockapis():
    loop = asyncio.get_running_loop()
    l = listener(); l.setblocking(False)
    port = l.getsockname()[1]
    async def srv():
        c, _ = await loop.sock_accept(l)
        note(c); c.setblocking(False)
        tot = b""
        while True:
            b = await loop.sock_recv(c, 65536)
            if not b: break
            tot += b
        await loop.sock_sendall(c, hashlib.sha256(tot).digest())
        buf = bytearray(10)
        n = await loop.sock_recv_into(c, buf)
        c.close()
        return n
    t = asyncio.ensure_future(srv())
    c = socket.socket(); c.setblocking(False)
    await loop.sock_connect(c, ("127.0.0.1", port))
    note(c)
    d = data(3_000_000, 7)
    await loop.sock_sendall(c, d)
    c.shutdown(socket.SHUT_WR)
    h = await loop.sock_recv(c, 32)
    c.close()
    n = await t
    l.close()
    return h == hashlib.sha256(d).digest() and n == 0
print("loop.sock_* ok", asyncio.run(sockapis()))

# 3. socket.sendfile + makefile
def sendfile_makefile():
    l = listener(); port = l.getsockname()[1]
    d = data(5_000_000, 3)
    f = tempfile.TemporaryFile(); f.write(d); f.flush(); f.seek(0)
    res = {}
    def srv():
        c, _ = l.accept(); note(c)
        rf = c.makefile("rb")
        line = rf.readline()
        body = rf.read(int(line))
        wf = c.makefile("wb")
        wf.write(hashlib.sha256(body).hexdigest().encode() + b"\n"); wf.flush()
        rf.close(); wf.close(); c.close()
    th = threading.Thread(target=srv); th.start()
    c = socket.create_connection(("127.0.0.1", port)); note(c)
    c.sendall(b"%d\n" % len(d))
    sent = c.sendfile(f)
    rf = c.makefile("r")
    h = rf.readline().strip()
    th.join(); c.close(); l.close()
    return sent == len(d) and h == hashlib.sha256(d).hexdigest()
print("sendfile+makefile ok", sendfile_makefile())

# 4. selectors: echo server on each selector, 20 clients
def sel_echo(cls):
    sel = cls()
    l = listener(); l.setblocking(False); port = l.getsockname()[1]
    sel.register(l, selectors.EVENT_READ, None)
    stop = [False]
    def serve():
        bufs = {}
        while not stop[0]:
            for key, ev in sel.select(0.2):
                if key.data is None:
                    try:
                        c, _ = l.accept()
                    except BlockingIOError:
                        continue
                    note(c); c.setblocking(False)
                    bufs[c] = b""
                    sel.register(c, selectors.EVENT_READ, "c")
                    continue
                c = key.fileobj
                if ev & selectors.EVENT_READ:
                    try:
                        b = c.recv(65536)
                    except BlockingIOError:
                        continue
                    if not b:
                        bufs[c] += b"" ; 
                        sel.unregister(c)
                        if bufs[c]:
                            sel.register(c, selectors.EVENT_WRITE, "w")
                        else:
                            c.close(); del bufs[c]
                        continue
                    bufs[c] += b
                    # switch to write when we have pending
                    sel.modify(c, selectors.EVENT_READ | selectors.EVENT_WRITE, "c")
                if ev & selectors.EVENT_WRITE:
                    try:
                        n = c.send(bufs[c])
                    except BlockingIOError:
                        n = 0
                    bufs[c] = bufs[c][n:]
                    if not bufs[c]:
                        if key.data == "w":
                            sel.unregister(c); c.close(); del bufs[c]
                        else:
                            sel.modify(c, selectors.EVENT_READ, "c")
    th = threading.Thread(target=serve); th.start()
    ok = True
    def client(i, out):
        c = socket.create_connection(("127.0.0.1", port)); note(c)
        d = data(300000, i)
        def w():
            c.sendall(d); c.shutdown(socket.SHUT_WR)
        t = threading.Thread(target=w); t.start()
        got = b""
        while True:
            b = c.recv(65536)
            if not b: break
            got += b
        t.join(); c.close()
        out[i] = got == d
    out = {}
    ts = [threading.Thread(target=client, args=(i, out)) for i in range(20)]
    [t.start() for t in ts]; [t.join(60) for t in ts]
    stop[0] = True; th.join(); sel.close(); l.close()
    return len(out) == 20 and all(out.values())
for cls in (selectors.PollSelector, selectors.SelectSelector, selectors.EpollSelector):
    print("selectors", cls.__name__, "ok", sel_echo(cls))
print("transports", " ".join(sorted(seen)))
