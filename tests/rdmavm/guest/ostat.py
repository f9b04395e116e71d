"""ostat.py FILE PROGRAM TRANSPORT MIN [REASON]: check osfstat --json output.

Every connected socket (role client or server) of every process whose program
name contains PROGRAM must have TRANSPORT (and, if given, a reason containing
REASON); there must be at least MIN of them; for rdma, some must have moved
bytes. Prints what it saw; exits 1 on a mismatch, 2 when there are fewer
than MIN sockets or none moved bytes yet (worth asking again)."""
import json
import sys

path, prog, want, least = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
reason = sys.argv[5] if len(sys.argv) > 5 else None
try:
    d = json.load(open(path))
except Exception as e:  # osfstat failed: its output is the message
    print(f"  osfstat: {e}: {open(path).read()[:400]}")
    sys.exit(1)
ok, seen, moving = True, 0, 0
for p in d.get("processes", []):
    if prog not in p.get("program", ""):
        continue
    for s in p.get("sockets", []):
        if s.get("role") not in ("client", "server"):
            continue
        seen += 1
        seg = s.get("segment") or {}
        moved = seg.get("bytes_out", 0) + seg.get("bytes_in", 0)
        good = s.get("transport") == want
        if reason is not None and reason not in (s.get("reason") or ""):
            good = False
        moving += moved > 0
        ok = ok and good
        if seen <= 6 or not good:
            print(f"  {'ok ' if good else 'BAD'} {p['program']}[{p['pid']}] fd={s.get('fd')} {s.get('role')} "
                  f"{s.get('local')} -> {s.get('peer')} transport={s.get('transport')} "
                  f"reason={s.get('reason')!r} bytes={moved}")
if seen > 6:
    print(f"  ... {seen} connected sockets of {prog}")
if not ok:
    sys.exit(1)
if seen < least or (want == "rdma" and moving == 0):
    print(f"  {seen} connected sockets of {prog} ({moving} moved bytes), want at least {least} and bytes")
    sys.exit(2)
sys.exit(0)
