# asyncio_echo.py: an asyncio streams echo server (TestServerAsyncioEcho) and
# the client of make bench's python asyncio row (tests/bench/run.sh).
#   asyncio_echo.py server PORT       an asyncio streams echo server
#   asyncio_echo.py client PORT N     sends N random bytes on one connection
#                                     while reading the echo, checks them
#                                     (SHA-256) and prints "MB/s X" (N bytes
#                                     over the time from connect to the
#                                     echo's last byte) or exits 1
import asyncio, hashlib, os, sys, time

async def handle(r, w):
    while True:
        d = await r.read(1 << 16)
        if not d:
            break
        w.write(d)
        await w.drain()
    w.close()

async def server(port):
    s = await asyncio.start_server(handle, "127.0.0.1", port)
    async with s:
        await s.serve_forever()

async def client(port, n):
    data = os.urandom(n)
    t0 = time.monotonic()
    r, w = await asyncio.open_connection("127.0.0.1", port)
    async def send():
        for i in range(0, n, 1 << 16):
            w.write(data[i:i + (1 << 16)])
            await w.drain()
        w.write_eof()
    t = asyncio.ensure_future(send())
    h, got = hashlib.sha256(), 0
    while True:
        d = await r.read(1 << 16)
        if not d:
            break
        h.update(d)
        got += len(d)
    await t
    dt = time.monotonic() - t0
    w.close()
    if got != n or h.digest() != hashlib.sha256(data).digest():
        print(f"echo: {got} bytes of {n}, or not the bytes sent", file=sys.stderr)
        sys.exit(1)
    print(f"MB/s {n / dt / 1e6:.1f}")

if sys.argv[1] == "server":
    asyncio.run(server(int(sys.argv[2])))
else:
    asyncio.run(client(int(sys.argv[2]), int(sys.argv[3])))
