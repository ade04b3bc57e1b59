#!/usr/bin/env bash
# A/B of two gateways under the same load at the same moments: gateway A
# ($SLUICE_A with $EXTRA_A) and gateway B ($SLUICE_B with $EXTRA_B) serve the
# same deployment ($CONFIG) in front of one `sluice mock-llm`, both as
# platform gateways of bench/platformstub (which serves their documents and
# discards usage batches). One open-loop load generator alternates its
# requests between them, each at $RATE req/s, so both see the same CPU
# contention; the figure is each gateway's CPU time per request over the run
# (from /proc), and B's against A's. The gateways swap the load generator's
# two slots every run, so a slot's own bias cancels out over an even number
# of runs.
#
# Use it where a closed-loop throughput ratio is lost in a shared machine's
# noise: two builds of the same deployment (SLUICE_A=old SLUICE_B=new), or
# one build with and without a feature (EXTRA_B='meter: {sink: none,
# accessLog: "off"}').
#
# Environment (defaults in brackets): SLUICE_A, SLUICE_B [empty: build
# ./cmd/sluice], EXTRA_A, EXTRA_B [empty: YAML lines added at the
# deployment's top level; default meter: {sink: platform}], CONFIG
# [bench/fullchain.yaml], RATE [1000, per gateway], DURATION [15s], WARMUP
# [2s], RUNS [6].
set -euo pipefail

RATE=${RATE:-1000}
DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-2s}
RUNS=${RUNS:-6}
CONFIG=${CONFIG:-bench/fullchain.yaml}
KEY=sk-sluice-bench

cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-ab.XXXXXX")
pids=()
cleanup() {
	local rc=$?
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for side in A B; do
	bin_var=SLUICE_$side
	if [[ -n "${!bin_var:-}" ]]; then cp "${!bin_var}" "$work/sluice-$side"; else go build -o "$work/sluice-$side" ./cmd/sluice; fi
done
go build -o "$work/loadgen" ./bench/loadgen
go build -o "$work/platformstub" ./bench/platformstub

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mock_port=$(port)
stub_port=$(port)
declare -A gw_port gw_pid
for side in A B; do
	extra_var=EXTRA_$side
	# The platform serves rendered documents: no environment expansion.
	{ cat "$CONFIG"; echo "${!extra_var:-meter: {sink: platform\}}"; } |
		sed "s|\${SLUICE_BENCH_UPSTREAM}|http://127.0.0.1:$mock_port|g" >"$work/$side.yaml"
	gw_port[$side]=$(port)
done
"$work/platformstub" -listen "127.0.0.1:$stub_port" -doc "A=$work/A.yaml" -doc "B=$work/B.yaml" >"$work/stub.log" 2>&1 &
pids+=($!)
"$work/sluice-A" mock-llm --listen "127.0.0.1:$mock_port" >"$work/mock.log" 2>&1 &
pids+=($!)
"$work/loadgen" -wait "http://127.0.0.1:$stub_port/healthz"
"$work/loadgen" -wait "http://127.0.0.1:$mock_port/healthz"
for side in A B; do
	"$work/sluice-$side" gateway --platform "http://127.0.0.1:$stub_port" --token "$side" --cache "$work/$side-cache" \
		--listen "127.0.0.1:${gw_port[$side]}" >"$work/$side.out" 2>"$work/$side.log" &
	pids+=($!)
	gw_pid[$side]=$!
	"$work/loadgen" -wait "http://127.0.0.1:${gw_port[$side]}/readyz" || { cat "$work/$side.log" >&2; exit 1; }
done

echo "machine: $(nproc) cores; config $CONFIG, $RATE req/s per gateway, $RUNS runs of $WARMUP + $DURATION"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick_us=$((1000000 / $(getconf CLK_TCK)))
url() { echo "http://127.0.0.1:${gw_port[$1]}/openai/v1/chat/completions"; }
printf '\n| run | A: CPU us/req | B: CPU us/req | B/A | A: p50 / p99 us | B: p50 / p99 us |\n|---|---:|---:|---:|---:|---:|\n'
: >"$work/ratios"
for run in $(seq 1 "$RUNS"); do
	first=A second=B
	(( run % 2 == 0 )) && first=B second=A
	a0=$(cpu_ticks "${gw_pid[A]}") b0=$(cpu_ticks "${gw_pid[B]}")
	"$work/loadgen" -mode open -rate "$RATE" -url "$(url $first)" -label "$first" -url2 "$(url $second)" -label2 "$second" \
		-H "Authorization: Bearer $KEY" -duration "$DURATION" -warmup "$WARMUP" >"$work/run.txt"
	a1=$(cpu_ticks "${gw_pid[A]}") b1=$(cpu_ticks "${gw_pid[B]}")
	# The CPU counters span warm-up and measured time: the requests of both
	# are the measured ones scaled by their length (an open loop's rate is
	# the same in both).
	awk -v a="$((a1 - a0))" -v b="$((b1 - b0))" -v tick="$tick_us" -v scale="$(( ${WARMUP%s} + ${DURATION%s} ))/${DURATION%s}" -v run="$run" -v ratios="$work/ratios" '
	function field(name,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } return "" }
	BEGIN { split(scale, sc, "/"); k = sc[1] / sc[2] }
	/^RESULT / { l = field("label"); n[l] = field("requests") * k; p50[l] = field("p50_us"); p99[l] = field("p99_us") }
	END {
		ca = a * tick / n["A"]; cb = b * tick / n["B"]
		printf "| %s | %.1f | %.1f | %.3f | %s / %s | %s / %s |\n", run, ca, cb, cb / ca, p50["A"], p99["A"], p50["B"], p99["B"]
		printf "%.4f\n", cb / ca >>ratios
	}' "$work/run.txt"
done
sort -n "$work/ratios" | awk '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "median B/A CPU per request: %.3f (runs %.3f-%.3f)\n", m, v[1], v[NR]}'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
