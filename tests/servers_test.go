package tests

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// Real servers whose event loops broke under osf (issue 16): each runs bare
// and with both ends under osf; under osf the test asserts through osfstat
// that the connections are offloaded (shm) while they run, and every test
// checks the bytes that came back.

// TestServerRedisBgsave runs redis-benchmark against redis-server while
// BGSAVE forks three children one after the other (each child closes its
// copies of the listener and the connections, which the parent keeps in
// the epoll they share), then stores and reads back a 1 MiB random value
// over new connections: redis must keep accepting and answering.
func TestServerRedisBgsave(t *testing.T) {
	t.Parallel()
	server, bench, cli := testutil.Tool(t, "redis-server"), testutil.Tool(t, "redis-benchmark"), testutil.Tool(t, "redis-cli")
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			port := strconv.Itoa(testutil.FreePort(t))
			srv := m.cmd(t, nil, server, "--port", port, "--bind", "127.0.0.1", "--save", "",
				"--appendonly", "no", "--dir", dir).Start()
			testutil.WaitListening(t, "127.0.0.1:"+port, shortRun)
			redis := func(args ...string) *testutil.Command {
				return m.cmd(t, nil, cli, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...)
			}
			b := m.cmd(t, nil, bench, "-h", "127.0.0.1", "-p", port, "-t", "set,get",
				"-n", "200000", "-c", "20", "-q", "--csv").Start()
			assertConns(t, m, b.Pid, srv.Pid, 10, "redis-benchmark")
			for i := 0; i < 3; i++ {
				if r := redis("BGSAVE").MustRun(shortRun); !strings.Contains(r.Stdout, "Background saving started") {
					t.Fatalf("BGSAVE %d: %q", i, r.Stdout)
				}
				testutil.WaitFor(t, shortRun, "BGSAVE to finish", func() bool {
					r := redis("INFO", "persistence").Run(shortRun)
					return r.OK() && strings.Contains(r.Stdout, "rdb_bgsave_in_progress:0")
				})
			}
			r := b.Wait(longRun)
			if !r.OK() {
				t.Fatalf("redis-benchmark across BGSAVEs: %s", r)
			}
			if !strings.Contains(r.Stdout, `"SET"`) || !strings.Contains(r.Stdout, `"GET"`) {
				t.Errorf("redis-benchmark: no SET/GET rates:\n%s", r.Stdout)
			}
			value := testutil.RandomBytes(t, 1<<20)
			set := redis("-x", "SET", "big")
			set.Cmd.Stdin = bytes.NewReader(value)
			if r := set.MustRun(shortRun); r.Stdout != "OK\n" {
				t.Fatalf("redis-cli SET after BGSAVE: %q", r.Stdout)
			}
			got := redis("--raw", "GET", "big").MustRun(shortRun).Stdout
			if got != string(value)+"\n" {
				t.Errorf("redis-cli GET after BGSAVE: %d bytes (sha256 %s), want %d (sha256 %s) and a newline",
					len(got), testutil.SHA256([]byte(got)), len(value), testutil.SHA256(value))
			}
			if srv.Exited() {
				t.Errorf("redis-server died: %s", srv.Wait(0))
			}
			noOsfMessages(t, "redis-server", srv.Stderr())
		})
	}
}

// asyncioEchoScript is an asyncio stream echo: "server PORT" echoes every
// connection until its end, then closes; "client PORT N" sends N random
// bytes and its end (write_eof) while reading the echo slowly, so that
// asyncio's flow control pauses and resumes reading (EPOLL_CTL_DEL/ADD/MOD
// of the fd) around the server's FIN, and prints "BYTES SENT_SHA RECV_SHA"
// once it sees the end.
const asyncioEchoScript = `
import asyncio, hashlib, os, sys

async def handle(r, w):
    while True:
        d = await r.read(1 << 16)
        if not d:
            break
        w.write(d)
        await w.drain()
    w.close()

async def server(port):
    s = await asyncio.start_server(handle, '127.0.0.1', port)
    async with s:
        await s.serve_forever()

async def client(port, n):
    r, w = await asyncio.open_connection('127.0.0.1', port)
    data = os.urandom(n)
    async def send():
        w.write(data)
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
        if (got >> 16) % 5 == 0:
            await asyncio.sleep(0.0005)
    await t
    print(got, hashlib.sha256(data).hexdigest(), h.hexdigest(), flush=True)

if sys.argv[1] == 'server':
    asyncio.run(server(int(sys.argv[2])))
else:
    asyncio.run(client(int(sys.argv[2]), int(sys.argv[3])))
`

// TestServerAsyncioEcho sends 20 MB through an asyncio echo server to an
// asyncio client that reads slowly (pause/resume_reading around the
// server's FIN): every byte must come back and the client must see the
// end.
func TestServerAsyncioEcho(t *testing.T) {
	t.Parallel()
	const n = 20_000_000
	for _, m := range bareAndOsf {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			port := strconv.Itoa(testutil.FreePort(t))
			srv := m.cmd(t, nil, python(t), "-c", asyncioEchoScript, "server", port).Start()
			testutil.WaitListening(t, "127.0.0.1:"+port, shortRun)
			cli := m.cmd(t, nil, python(t), "-c", asyncioEchoScript, "client", port, strconv.Itoa(n)).Start()
			assertConns(t, m, cli.Pid, srv.Pid, 1, "asyncio client")
			r := cli.Wait(longRun)
			if !r.OK() {
				t.Fatalf("asyncio client (never saw the end?): %s", r)
			}
			f := strings.Fields(r.Stdout)
			if len(f) != 3 || f[0] != strconv.Itoa(n) || f[1] != f[2] {
				t.Errorf("asyncio client: got %q, want %d bytes with the sent SHA-256", r.Stdout, n)
			}
			if srv.Exited() {
				t.Errorf("asyncio server died: %s", srv.Wait(0))
			}
			noOsfMessages(t, "asyncio client", r.Stderr)
		})
	}
}
