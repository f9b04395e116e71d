#!/usr/bin/env python3
"""summarize.py: per-round ratios of run.sh churn|wake output (stdin).
churn: conn/s of each variant over kernel TCP's in the same round and pinning;
wake: round trip p50 and CPU per round trip over the unix token's."""
import re, statistics, sys
rows = []
for line in sys.stdin:
    kv = dict(re.findall(r'(\w+)=([\w.\-]+)', line))
    name = line.split()[2] if line.startswith('round=') else None
    if not name: continue
    kv['name'] = name
    rows.append(kv)
def med(xs): return statistics.median(xs) if xs else float('nan')
if rows and 'conn_per_s' in rows[0]:
    base = 'tcp'
    for pin in ('1', '0'):
        print(f"pin={pin}")
        for v in ('tcp', 'osf', 'pool', 'fresh', 'spin', 'nohello', 'bound', 'pair', 'segment', 'step1'):
            rs, ratios, cc, sc, p50 = [], [], [], [], []
            if not any(r['name'] == v for r in rows): continue
            for r in rows:
                if r['name'] != v or r['pin'] != pin: continue
                b = [x for x in rows if x['name'] == base and x['pin'] == pin and x['round'] == r['round']][0]
                rs.append(float(r['conn_per_s'])); ratios.append(float(r['conn_per_s']) / float(b['conn_per_s']))
                cc.append(float(r['client_cpu_us'])); sc.append(float(r['server_cpu_us'])); p50.append(float(r['p50_us']))
            print(f"  {v:7s} conn/s med {med(rs):7.0f} [{min(rs):.0f}-{max(rs):.0f}]  /tcp med {med(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
                  f"  p50 {med(p50):.1f} us  cpu client {med(cc):.1f} [{min(cc):.1f}-{max(cc):.1f}] server {med(sc):.1f} [{min(sc):.1f}-{max(sc):.1f}] us")
else:
    for pin in ('1', '0'):
        print(f"pin={pin}")
        for m in ('unix', 'tcp', 'futex', 'eventfd', 'tcpdata'):
            p50, p90, cpu = [], [], []
            for r in rows:
                if r['name'] != m or r['pin'] != pin: continue
                p50.append(float(r['rt_p50_us'])); p90.append(float(r['rt_p90_us']))
                cpu.append(float(r['cpu_a_us']) + float(r['cpu_b_us']))
            print(f"  {m:8s} rt p50 med {med(p50):5.1f} [{min(p50):.1f}-{max(p50):.1f}] us  p90 med {med(p90):5.1f}"
                  f"  cpu/rt (both) med {med(cpu):5.1f} [{min(cpu):.1f}-{max(cpu):.1f}] us")
