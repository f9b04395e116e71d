"""benchtable.py OUT: the Markdown table of make bench-rdma from bench.sh's
outputs in OUT (bench-NAME.out, written in guest B)."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import setuplaps  # noqa: E402  (this directory's)

out = sys.argv[1]


def read(name):
    try:
        return open(os.path.join(out, f"bench-{name}.out"), errors="replace").read()
    except OSError:
        return ""


def perf(name, key):
    for line in read(name).splitlines():
        if line.startswith("{"):
            try:
                return float(json.loads(line)[key])
            except (ValueError, KeyError):
                pass
    return None


def connrate(t):
    m = re.search(r"per_s=([0-9.]+)", read(f"cr-{t}"))
    return float(m.group(1)) if m else None


def cr_rounds(t, what="per_s", ext="out"):
    """A figure of every cr round of t (bench.sh rounds=N): per_s, or
    cpu_ms (per connection; ext srv: the server's)."""
    v = []
    for f in sorted(os.listdir(out)):
        if re.fullmatch(rf"bench-cr(\.[0-9]+)?-{re.escape(t)}\.{ext}", f):
            m = re.search(rf"{what}=([0-9.]+)", open(os.path.join(out, f), errors="replace").read())
            if m:
                v.append(float(m.group(1)))
    return v


def redis(t, test):
    for line in read(f"redis-{t}").replace("\r", "\n").splitlines():
        f = [x.strip('"') for x in line.split(",")]
        if len(f) > 1 and f[0] == test:
            try:
                return float(f[1])
            except ValueError:
                pass
    return None


def wrk(t):
    m = re.search(r"Requests/sec:\s*([0-9.]+)", read(f"ng-{t}"))
    return float(m.group(1)) if m else None


def wrk_rounds(t):
    """Requests/sec of every ng round of t (bench.sh rounds=N), and the
    requests over wrk's timeout in all of them."""
    rates, late = [], 0
    for f in sorted(os.listdir(out)):
        if re.fullmatch(rf"bench-ng(\.[0-9]+)?-{re.escape(t)}\.out", f):
            text = open(os.path.join(out, f), errors="replace").read()
            m = re.search(r"Requests/sec:\s*([0-9.]+)", text)
            if m:
                rates.append(float(m.group(1)))
            m = re.search(r"timeout ([0-9]+)", text)
            late += int(m.group(1)) if m else 0
    return rates, late


def perftest(name, col):
    """A column of perftest's result row (the line after the header)."""
    lines = read(name).splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes"):
            for row in lines[i + 1:]:
                f = row.split()
                if len(f) > col and f[0].isdigit():
                    return float(f[col])
    return None


def over_rdma_cm(name):
    """rsocket's run NAME left the connection manager's ids of its program
    (bench.sh lists them on A): else librspreload quietly used kernel TCP."""
    try:
        ids = open(os.path.join(out, f"bench-{name}-rsocket.cmid"), errors="replace").read()
    except OSError:
        return False
    return re.search(r"ps TCP .*comm (osfperf|python3)", ids) is not None


# Every other osf that ran (bench.sh ts=...: osf.engine, OSF_RDMA_RX=engine,
# the way back from the default caller; osfalt, another build; osf.rSIZE...)
# gets a column of its own and a ratio against osf.
others = sorted({m.group(1) for m in (re.fullmatch(r"bench-[a-z]+(?:\.[0-9]+)?-(osf[^/]*)\.out", f)
                                       for f in os.listdir(out)) if m and m.group(1) != "osf"})
ts = ["kernel", "osf", "rsocket"] + others


def switches(t):
    """Context switches per ping-pong round trip of the programs' threads
    on hosts A and B (bench.sh threads: the last per-thread sample),
    warm-up included."""
    n = perf(f"pp-{t}", "n")
    per = []
    for host in "AB":
        try:
            lines = open(os.path.join(out, f"bench-pp-{t}.threads-{host}"), errors="replace").read().splitlines()
        except OSError:
            return None
        per.append(sum(int(f[2]) for f in (x.split() for x in lines) if len(f) > 2 and f[2].isdigit()))
    if not n or not all(per):
        return None
    return "%.1f / %.1f" % tuple(p / (n + 200) for p in per)
rows = [
    ("ping-pong 64 B, p50 (µs, lower is better)", "pp", {t: perf(f"pp-{t}", "p50") for t in ts}, perftest("dev-lat", 4), False),
    ("ping-pong 64 B, p99 (µs)", "pp", {t: perf(f"pp-{t}", "p99") for t in ts}, perftest("dev-lat", 7), False),
    ("single stream, 64 KiB writes (MB/s)", "st", {t: perf(f"st-{t}", "MB_per_s") for t in ts}, perftest("dev-bw", 3), True),
    ("redis GET, 10 clients (req/s)", None, {t: redis(t, "GET") for t in ts}, None, True),
    ("redis SET, 10 clients (req/s)", None, {t: redis(t, "SET") for t in ts}, None, True),
    ("connection set-up (conn/s)", "cr", {t: connrate(t) for t in ts}, None, True),
    ("nginx (2 workers) -> wrk, 8 connections (req/s)", None, {t: wrk(t) for t in ts}, None, True),
]
cr_n = max(len(cr_rounds(t)) for t in ts)
cr_rows = []
if cr_n > 1:
    cr_rows.append((f"connection set-up, median of {cr_n} rounds (conn/s)", "cr",
                    {t: setuplaps.median(cr_rounds(t)) for t in ts}, None, True))
if cr_n:
    cr_rows.append(("connection set-up: CPU per connection, client (ms, median of the rounds)", "cr",
                    {t: setuplaps.median(cr_rounds(t, "cpu_ms")) for t in ts}, None, False))
    cr_rows.append(("connection set-up: CPU per connection, server (ms, median of the rounds)", "cr",
                    {t: setuplaps.median(cr_rounds(t, "cpu_ms", "srv")) for t in ts}, None, False))
at = next(i for i, r in enumerate(rows) if r[1] == "cr") + 1
rows[at:at] = cr_rows
ng_rounds = max(len(wrk_rounds(t)[0]) for t in ts)
if ng_rounds > 1:
    rows.append((f"nginx -> wrk, mean of {ng_rounds} rounds (req/s)", None,
                 {t: (sum(r) / len(r) if r else None) for t, r in ((t, wrk_rounds(t)[0]) for t in ts)}, None, True))
rows.append(("nginx -> wrk: requests over wrk's 2 s timeout, all rounds", None,
             {t: (float(wrk_rounds(t)[1]) if wrk_rounds(t)[0] else None) for t in ts}, None, False))


def fmt(v):
    if v is None:
        return "n/a"
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def ratio(a, b, higher):
    if a is None or b is None or a == 0 or b == 0:
        return "n/a"
    r = a / b if higher else b / a
    return f"{r:.2f}x"


head = "| metric (in the qemu guests) | kernel TCP | osf | rsocket | device (perftest) | osf vs rsocket | osf vs kernel |"
for o in others:
    head += f" {o} | osf vs {o} |"
print(head)
print("|---" * head.count(" |") + "|")
for name, step, v, dev, higher in rows:
    rs = fmt(v["rsocket"])
    if step is None:
        rs = "cannot run¹"
    elif v["rsocket"] is not None and not over_rdma_cm(step):
        rs, v["rsocket"] = "kernel TCP²", None
    line = (f"| {name} | {fmt(v['kernel'])} | {fmt(v['osf'])} | {rs} | {fmt(dev)} | "
            f"{ratio(v['osf'], v['rsocket'], higher)} | {ratio(v['osf'], v['kernel'], higher)} |")
    for o in others:
        line += f" {fmt(v[o])} | {ratio(v['osf'], v[o], higher)} |"
    print(line)
sw = {t: switches(t) for t in ts}
line = (f"| ping-pong: context switches per round trip, host A / B | {sw['kernel'] or 'n/a'} | "
        f"{sw['osf'] or 'n/a'} | {sw['rsocket'] or 'n/a'} | | | |")
for o in others:
    line += f" {sw[o] or 'n/a'} | |"
print(line)
print()
print("Ratios are osf's advantage (>1x: osf better). Device: ib_send_lat t_typical and 99%, ib_write_bw BW average.")
print("¹ redis and nginx wait in epoll, which librspreload (rdma-core 44) does not intercept: "
      "redis-server fails at start (bench-redis-rsocket.srv).")
print("² no rdma_cm id of the program was seen: librspreload used kernel TCP; not counted.")
# Where osf's set-up time goes (the cr rows' debug logs).
laps = setuplaps.report(out, setuplaps.transports(out))
if laps:
    print()
    print("\n".join(laps))
