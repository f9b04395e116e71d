"""setuplaps.py OUT: where an RDMA connection's set-up and teardown time
goes, from the debug logs of bench.sh's cr rows in OUT (T-bench-A.log: the
server, T-bench-B.log: the client, for every osf transport T that ran).

The core logs each step's time at debug level (sdp/rdma laps.go):
  client  "rdma: connect to D took TOTAL (step t, ...)" and "connect D: rdma
          via ...; decision and source address t, dial t" (the core's work
          before the dial);
  server  "rdma: connection N established after TOTAL (step t, ...)" (from
          the engine's handling of the request to ESTABLISHED);
  both    "rdma: connection N released after TOTAL (step t, ...)".
For each, it prints the median and mean of the total and of each step in
ms, with how many connections had the step when not all did (a reused
segment skips "segment", "cq", "mr"; a spare's QP skips "qp"). The first
connection of each process is included (it loads the device).
"""
import collections
import os
import re
import sys

KINDS = [
    ("client connect", "B", re.compile(r"rdma: connect to \S+ took (\S+) \((.*?)\)\s")),
    ("client core", "B", re.compile(r"connect \S+: rdma via .*decision and source address (\S+), dial (\S+)")),
    ("server accept", "A", re.compile(r"rdma: connection \d+ established after (\S+) \((.*?)\)\s")),
    ("client release", "B", re.compile(r"rdma: connection \d+ released after (\S+) \((.*?)\);")),
    ("server release", "A", re.compile(r"rdma: connection \d+ released after (\S+) \((.*?)\);")),
]


def ms(s):
    """A Go duration as laps prints it (1.5ms, 250µs, 1.2s) in ms."""
    m = re.fullmatch(r"([0-9.]+)(ms|µs|us|s|ns)", s)
    if not m:
        return None
    return float(m.group(1)) * {"ms": 1, "µs": 1e-3, "us": 1e-3, "s": 1e3, "ns": 1e-6}[m.group(2)]


def steps(out, t):
    """{kind: {step: [ms...]}} of transport t, in log order."""
    res = {}
    for kind, host, rx in KINDS:
        try:
            lines = open(os.path.join(out, f"{t}-bench-{host}.log"), errors="replace").read().splitlines()
        except OSError:
            continue
        d = collections.OrderedDict()
        for line in lines:
            m = rx.search(line)
            if not m:
                continue
            if kind == "client core":
                for name, v in (("decision", m.group(1)), ("dial", m.group(2))):
                    d.setdefault(name, []).append(ms(v))
                continue
            d.setdefault("TOTAL", []).append(ms(m.group(1)))
            for part in m.group(2).split(", "):
                name, _, v = part.rpartition(" ")
                if ms(v) is not None:
                    d.setdefault(name, []).append(ms(v))
        if d:
            res[kind] = d
    return res


def median(v):
    """The median of v, None when v is empty."""
    v = sorted(v)
    if not v:
        return None
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def report(out, ts):
    """The lines of the summary for transports ts (those without logs are
    left out)."""
    lines = []
    for t in ts:
        st = steps(out, t)
        if not st:
            continue
        lines.append(f"{t}: set-up and teardown steps, median/mean ms ([n]: connections with the step)")
        for kind, d in st.items():
            n = max(len(v) for v in d.values())
            parts = [f"{name} {median(v):.1f}/{sum(v) / len(v):.1f}" + (f"[{len(v)}]" if len(v) != n else "")
                     for name, v in d.items()]
            lines.append(f"  {kind} (n={n}): " + ", ".join(parts))
    return lines


def transports(out):
    return sorted({m.group(1) for m in (re.fullmatch(r"(osf[^/]*)-bench-[AB]\.log", f) for f in os.listdir(out)) if m})


if __name__ == "__main__":
    d = sys.argv[1]
    print("\n".join(report(d, transports(d))))
