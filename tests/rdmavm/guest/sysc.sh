# The system calls of the RDMA ping-pong per round trip, by call, in both
# guests (A serves, B is the client), one variant after another in one
# boot: osfperf's ping-pong under `strace -f -c` for SHORT and LONG round
# trips (after 100 of warm-up each), the difference per round trip; with
# stacks=N, then one more run of N round trips under `strace -f -k` of the
# calls named by calls= (default poll,ppoll,read,write,ioctl,clock_gettime),
# summed by the osf (or rdma-core) function that made each.
#   sysc.sh [row=redis] [short=N] [long=N] [stacks=N] [calls=C,C...]
#           [port=P] [count=0] VARIANT...
# VARIANT as abpp.sh's: NAME=TRANSPORT[,VAR=VALUE...], TRANSPORT kernel,
# rsocket, or a directory holding libosf.so and libosfcore.so. B prints
# "sc NAME call A-per-rt B-per-rt" lines, then "sc NAME total ...", and
# with stacks "st NAME HOST count call <- caller <- caller". row=redis
# counts redis-server (A) and redis-benchmark (B: GET, 10 clients) per
# request instead, SHORT and LONG requests. port=P: the first port (7701), for
# several runs in one boot (their variants' names must differ too: they
# name the barriers). count=0: no strace -c runs. Under strace an osf
# process's Go core starts slowly: the handshake's bound is a minute (each
# run says whether its connections were RDMA), and strace --seccomp-bpf
# would make libosf.so see a seccomp filter and stay out. A few hundred
# redis requests under strace -k take minutes.
. "$OSF_ROOT/tests/rdmavm/guest/lib.sh"
short=200
long=1200
stacks=0
count=1
row=pp
calls=poll,ppoll,read,write,ioctl,clock_gettime
vs=()
for a in "$@"; do
	case $a in
	short=*) short=${a#short=} ;;
	long=*) long=${a#long=} ;;
	stacks=*) stacks=${a#stacks=} ;;
	calls=*) calls=${a#calls=} ;;
	row=*) row=${a#row=} ;;
	port=*) port0=${a#port=} ;;
	count=*) count=${a#count=} ;;
	*) vs+=("$a") ;;
	esac
done
PERF=$BIN/osfperf
RSP=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
barrier up 300 || exit 1

run() { # NAME TRANSPORT VARS STRACE-ARGS -- ROLE ARGS...
	local name=$1 t=$2 vars=$3
	shift 3
	local -a st=() env=()
	while [ "$1" != -- ]; do st+=("$1"); shift; done
	shift
	[ -n "$vars" ] && IFS=, read -r -a env <<<"$vars"
	case $t in
	kernel) env "${env[@]}" strace "${st[@]}" "$@" ;;
	rsocket) env "${env[@]}" strace "${st[@]}" -E LD_PRELOAD=$RSP "$@" ;;
	# strace slows the Go core's start and the handshake: a minute for it
	*) env "${env[@]}" "OSF_ROUTES=$ROUTES" OSF_LOG_LEVEL=debug OSF_LOG_FILE="$OUT/osf-sc-$SC_TAG-$GUEST.log" \
		OSF_CONNECT_TIMEOUT_MS=60000 strace "${st[@]}" -E LD_PRELOAD="$t/libosf.so" "$@" ;;
	esac
}

export -f run
export PERF RSP ROUTES OUT GUEST

port=${port0:-7700}
one() { # TAG NAME T VARS N STRACE-ARGS...
	local tag=$1 name=$2 t=$3 vars=$4 n=$5
	shift 5
	port=$((port + 1))
	export SC_TAG=$tag
	if [ "$GUEST" = A ]; then
		local -a srv=("$PERF" server -a 10.77.0.1 -p $port -1)
		[ "$row" = redis ] && srv=(redis-server --bind 10.77.0.1 --port $port --save '' --appendonly no --protected-mode no)
		timeout -k 5 600 bash -c 'run "$@"' run "$name" "$t" "$vars" "$@" -o "$OUT/sc-$tag-A" -- "${srv[@]}" >"$OUT/sc-$tag.srv" 2>&1 &
		local sp=$!
		if [ "$t" = rsocket ]; then wait_cm_listen $port; else wait_listen $port; fi
		barrier "$tag-go" 600
		barrier "$tag-done" 900
		# redis-server (the guest's only one, under this strace) ends at
		# SIGTERM, and strace then writes its table
		local rp
		[ "$row" = redis ] && rp=$(pgrep -n -x redis-server) && kill -TERM "$rp"
		wait $sp
	else
		barrier "$tag-go" 600
		local -a cli=("$PERF" client -a 10.77.0.1 -p $port -t pingpong -s 64 -n "$n" --warmup 100 --json)
		[ "$row" = redis ] && cli=(redis-benchmark -h 10.77.0.1 -p $port -t get -n "$n" -c 10 -q --csv)
		timeout -k 5 600 bash -c 'run "$@"' run "$name" "$t" "$vars" "$@" -o "$OUT/sc-$tag-B" -- "${cli[@]}" \
			>"$OUT/sc-$tag.out" 2>&1
		local how=
		case $t in
		kernel | rsocket) ;;
		*) how="rdma: $(grep -c 'rdma via' "$OUT/osf-sc-$tag-B.log" 2>/dev/null), kernel: $(grep -cE 'connect [^ ]*: kernel: ' "$OUT/osf-sc-$tag-B.log" 2>/dev/null): " ;;
		esac
		echo "  $tag: $how$(tail -c 300 "$OUT/sc-$tag.out" | tr '\r\n' '  ')"
		barrier "$tag-done"
	fi
}

for v in "${vs[@]}"; do
	side_spec "$v"
	[ "$count" = 1 ] && one "$name-s" "$name" "$t" "$vars" "$short" -f -c
	[ "$count" = 1 ] && one "$name-l" "$name" "$t" "$vars" "$long" -f -c
	barrier "$name-counted" 60
	if [ "$GUEST" = B ] && [ "$count" = 1 ]; then
		python3 - "$OUT" "$name" $((long - short)) <<-'EOF'
			import sys
			out, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
			def counts(path):
			    c = {}
			    for l in open(path):
			        f = l.split()
			        if len(f) >= 5 and f[0].replace('.', '').isdigit() and f[-1] != 'total':
			            try:
			                c[f[-1]] = int(f[3])
			            except ValueError:
			                pass
			    return c
			d = {}
			for h in 'AB':
			    s, l = counts(f'{out}/sc-{name}-s-{h}'), counts(f'{out}/sc-{name}-l-{h}')
			    for k in set(s) | set(l):
			        d.setdefault(k, {})[h] = (l.get(k, 0) - s.get(k, 0)) / n
			tot = {h: sum(v.get(h, 0) for v in d.values()) for h in 'AB'}
			for k in sorted(d, key=lambda k: -(d[k].get('A', 0) + d[k].get('B', 0))):
			    a, b = d[k].get('A', 0), d[k].get('B', 0)
			    if abs(a) + abs(b) >= 0.02:
			        print(f'sc {name} {k} {a:.2f} {b:.2f}')
			print(f"sc {name} total {tot['A']:.2f} {tot['B']:.2f}")
		EOF
	fi
	if [ "$stacks" -gt 0 ]; then
		one "$name-k" "$name" "$t" "$vars" "$stacks" -f -k -e trace="$calls"
		barrier "$name-stacked" 60
		# per call, the first two frames of osf's or rdma-core's (or the
		# program's) own that made it
		python3 - "$OUT/sc-$name-k-$GUEST" "$name" "$GUEST" <<-'EOF'
			import re, sys, collections
			path, name, host = sys.argv[1:]
			c = collections.Counter()
			call, frames = None, []
			def flush():
			    if call:
			        own = [f for f in frames if not re.search(r'libc\.so|ld-linux|\[vdso\]', f)]
			        c[(call, ' <- '.join(own[:3]))] += 1
			for l in open(path):
			    m = re.match(r'^(?:\d+ +)?(\w+)\(', l)
			    if m and not l.startswith(' >'):
			        flush()
			        call, frames = m.group(1), []
			    elif l.startswith(' > '):
			        m = re.search(r'\(([^)+]+)\+0x[0-9a-f]+\)', l)
			        lib = l.split()[1].rsplit('/', 1)[-1]
			        frames.append(f"{m.group(1) if m else '?'}@{lib}")
			flush()
			for (k, s), n in c.most_common(25):
			    print(f'st {name} {host} {n} {k} <- {s}')
		EOF
	fi
done
barrier end 600
