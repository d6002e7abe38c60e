#!/usr/bin/env bash
# The hub's own user-space work per proxied command, in instructions counted by
# valgrind's callgrind: repeatable on a busy or drifting VM, where the
# wall-clock ratios of cmd/wsbench move with the machine's phase.
#
# It runs BenchmarkProxyCommand (internal/hub: one keep-alive client, the hub
# behind its production server, a local stub driver, all in one process) at N
# and 2N commands, straight to the driver and through the hub, and subtracts:
# a command's instructions are (run at 2N − run at N) / N, which cancels the
# set-up; the hub's own are the hub path's minus the direct path's. Kernel work
# (the system calls, the loopback wake-ups) is not counted: callgrind sees user
# space only, so this is the part of the per-command cost the hub's code owns.
#
# GOMAXPROCS=1: valgrind runs one thread at a time, and with more Ps Go's idle
# Ps spin looking for work for as long as the run lasts, which is noise here.
# cpu.rdtscp=off: valgrind 3.19 cannot execute RDTSCP, which Go's runtime uses
# for its tick counter where the CPU has it.
#
#   scripts/callgrind-proxy.sh [N]   (default 2000; about a minute)
set -euo pipefail
n=${1:-2000}
[[ $n =~ ^[1-9][0-9]{0,6}$ ]] || { echo "callgrind-proxy: N must be a number of commands, 1 to 9999999 (got '$n')" >&2; exit 2; }
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "callgrind-proxy: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/hub.test" ./internal/hub

run() { # path count → instructions
	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind \
		--callgrind-out-file="$dir/$1-$2.out" "$dir/hub.test" -test.run '^$' \
		-test.bench "BenchmarkProxyCommand/$1\$" -test.benchtime "${2}x" >"$dir/$1-$2.log" 2>&1 ||
		{ echo "callgrind-proxy: the $1 run of $2 commands failed:" >&2; tail -20 "$dir/$1-$2.log" >&2; exit 1; }
	sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/$1-$2.log"
}

# selfcosts FILE: "function instructions" per line, self cost, recursion marks folded.
selfcosts() {
	callgrind_annotate --threshold=100 "$1" |
		awk 'match($0, /^ *[0-9,]+ \( *[0-9.]+%\) +[^ ]*:/) { c=$1; gsub(",", "", c); f=$0; sub(/^[^%]*%\) +/, "", f); sub(/ .*$/, "", f)
			sub(/^[^:]*:/, "", f); sub(/'"'"'[0-9]+$/, "", f); s[f]+=c }
			END { for (f in s) print f, s[f] }'
}

d1=$(run direct "$n"); d2=$(run direct $((2 * n)))
h1=$(run hub "$n"); h2=$(run hub $((2 * n)))
direct=$(((d2 - d1) / n))
hub=$(((h2 - h1) / n))
own=$((hub - direct))
echo "instructions a command (user space, callgrind, $n commands): direct $direct, through the hub $hub"
echo "the hub's own: $own, $(awk -v o="$own" -v d="$direct" 'BEGIN { printf "%.3f", o / d }') × a direct command's (client and driver)"
echo "the hub's own by function (hub path − direct path, a command), the 20 largest:"
for p in direct hub; do
	for c in "$n" $((2 * n)); do selfcosts "$dir/$p-$c.out" >"$dir/$p-$c.self"; done
done
awk -v n="$n" '
	FILENAME ~ /direct-/ { sign = -1 } FILENAME ~ /hub-/ { sign = 1 }
	FILENAME ~ ("-" n ".self$") { own[$1] -= sign * $2; next }
	{ own[$1] += sign * $2 }
	END { for (f in own) printf "%10.0f  %s\n", own[f] / n, f }' \
	"$dir/direct-$n.self" "$dir/direct-$((2 * n)).self" "$dir/hub-$n.self" "$dir/hub-$((2 * n)).self" |
	sort -rn | awk 'NR <= 20' # reads to the end: head would leave sort a SIGPIPE, which pipefail reports
