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
# A second phase starts the two gateways again in the other order (and on
# each other's ports) and repeats the runs; the result is the geometric mean
# of the two phases' medians.
#
# MODE=closed measures throughput instead: two closed-loop load generators,
# one per gateway with $CONNS connections each, run at the same time, so
# both gateways compete for the same cores at the same moments; the figures
# are each gateway's throughput and CPU time per request, and B's against
# A's. Where a machine's speed drifts from one run to the next (rounds of
# one closed loop after the other read 0.57 to 1.25 for the same pair on
# the machine of docs/benchmarks.md), this ratio does not drift with it.
#
# Use it where a closed-loop throughput ratio is lost in a shared machine's
# noise: two builds of the same deployment (SLUICE_A=old SLUICE_B=new), or
# one build with and without a feature (EXTRA_B='meter: {sink: none,
# accessLog: "off"}'). Calibrate first with an A/A run (the same binary and
# deployment on both sides): on the 2-core machine of docs/benchmarks.md it
# read 1.018-1.031, not 1.000, in both phases, a bias of the B side this
# script does not explain; compare an A/B against it.
#
# Environment (defaults in brackets): SLUICE_A, SLUICE_B [empty: build
# ./cmd/sluice], EXTRA_A, EXTRA_B [empty: YAML lines added at the
# deployment's top level; default meter: {sink: platform}], CONFIG
# [bench/fullchain.yaml], RATE [1000, per gateway], DURATION [15s], WARMUP
# [2s], RUNS [4: runs in each of the two phases, the second with the
# gateways started in the other order], MODE [open; closed], CONNS [32,
# closed mode: connections per gateway].
set -euo pipefail

RATE=${RATE:-1000}
MODE=${MODE:-open}
CONNS=${CONNS:-32}
DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-2s}
RUNS=${RUNS:-4}
CONFIG=${CONFIG:-bench/fullchain.yaml}
KEY=sk-sluice-bench
case "$MODE" in open | closed) ;; *) echo "MODE must be open or closed, not $MODE" >&2; exit 2 ;; esac

cd "$(dirname "$0")/.."
. bench/lib.sh
bench_init ab

for side in A B; do
	bin_var=SLUICE_$side
	if [[ -n "${!bin_var:-}" ]]; then cp "${!bin_var}" "$work/sluice-$side"; else go build -o "$work/sluice-$side" ./cmd/sluice; fi
done
# The mock runs from a copy of its own: a gateway run from the mock's file
# shares its code pages (and so the caches' lines of them) with it, which
# gave that side a few per cent of throughput in A/A runs.
cp "$work/sluice-A" "$work/sluice-mock"
go build -o "$work/loadgen" ./bench/loadgen
go build -o "$work/platformstub" ./bench/platformstub

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
"$work/sluice-mock" mock-llm --listen "127.0.0.1:$mock_port" >"$work/mock.log" 2>&1 &
pids+=($!)
"$work/loadgen" -wait "http://127.0.0.1:$stub_port/healthz"
"$work/loadgen" -wait "http://127.0.0.1:$mock_port/healthz"
# start_gateways starts side $1 on the first port and side $2 on the
# second, stopping the ones before.
gw_procs=()
start_gateways() {
	for p in "${gw_procs[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	gw_procs=()
	local i=0 side
	for side in "$@"; do
		i=$((i + 1))
		gw_port[$side]=${slot_port[$i]}
		"$work/sluice-$side" gateway --platform "http://127.0.0.1:$stub_port" --token "$side" --cache "$work/$side-$phase-cache" \
			--listen "127.0.0.1:${gw_port[$side]}" >"$work/$side.out" 2>"$work/$side.log" &
		pids+=($!)
		gw_procs+=($!)
		gw_pid[$side]=$!
		"$work/loadgen" -wait "http://127.0.0.1:${gw_port[$side]}/readyz" || { cat "$work/$side.log" >&2; exit 1; }
	done
}
declare -A slot_port=([1]=${gw_port[A]} [2]=${gw_port[B]})

if [[ $MODE == open ]]; then
	echo "machine: $(nproc) cores; config $CONFIG, $RATE req/s per gateway, 2 x $RUNS runs of $WARMUP + $DURATION"
else
	echo "machine: $(nproc) cores; config $CONFIG, two closed loops of $CONNS connections at once, 2 x $RUNS runs of $WARMUP + $DURATION"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
tick_us=$((1000000 / $(getconf CLK_TCK)))
secs=$(( ${WARMUP%s} + ${DURATION%s} ))
url() { echo "http://127.0.0.1:${gw_port[$1]}/openai/v1/chat/completions"; }
# load runs one run's load and writes its RESULT lines to $work/run.txt.
load() {
	local first=$1 second=$2
	if [[ $MODE == open ]]; then
		"$work/loadgen" -mode open -rate "$RATE" -url "$(url $first)" -label "$first" -url2 "$(url $second)" -label2 "$second" \
			-H "Authorization: Bearer $KEY" -duration "$DURATION" -warmup "$WARMUP" >"$work/run.txt"
		return
	fi
	local side lp=()
	for side in "$first" "$second"; do
		"$work/loadgen" -mode closed -c "$CONNS" -url "$(url $side)" -label "$side" \
			-H "Authorization: Bearer $KEY" -duration "$DURATION" -warmup "$WARMUP" >"$work/run-$side.txt" &
		lp+=($!)
	done
	wait "${lp[@]}"
	cat "$work/run-$first.txt" "$work/run-$second.txt" >"$work/run.txt"
}
if [[ $MODE == open ]]; then
	printf '\n| phase | run | A: CPU us/req | B: CPU us/req | B/A | A: p50 / p99 us | B: p50 / p99 us |\n|---|---|---:|---:|---:|---:|---:|\n'
else
	printf '\n| phase | run | A: req/s | B: req/s | B/A throughput | A: CPU us/req | B: CPU us/req | B/A CPU | A: p50 / p99 us | B: p50 / p99 us |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
fi
for phase in 1 2; do
	# Phase 2 swaps the processes' order and ports, so that what comes with
	# being the first or the second gateway cancels out.
	if (( phase == 1 )); then start_gateways A B; else start_gateways B A; fi
	: >"$work/ratios-$phase"
	: >"$work/tput-$phase"
	for run in $(seq 1 "$RUNS"); do
		first=A second=B
		(( run % 2 == 0 )) && first=B second=A
		a0=$(cpu_ticks "${gw_pid[A]}") b0=$(cpu_ticks "${gw_pid[B]}")
		load "$first" "$second"
		a1=$(cpu_ticks "${gw_pid[A]}") b1=$(cpu_ticks "${gw_pid[B]}")
		# The CPU counters span warm-up and measured time. The open loop
		# sent each gateway the same requests, RATE a second; a closed
		# loop's count over both is taken as its measured rate times both.
		awk -v a="$((a1 - a0))" -v b="$((b1 - b0))" -v tick="$tick_us" -v secs="$secs" -v rate="$RATE" -v mode="$MODE" \
			-v phase="$phase" -v run="$run" -v ratios="$work/ratios-$phase" -v tput="$work/tput-$phase" '
		function field(name,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } return "" }
		/^RESULT / { l = field("label"); p50[l] = field("p50_us"); p99[l] = field("p99_us"); rps[l] = field("rps") }
		END {
			if (mode == "open") {
				ca = a * tick / (rate * secs); cb = b * tick / (rate * secs)
				printf "| %d | %d | %.1f | %.1f | %.3f | %s / %s | %s / %s |\n", phase, run, ca, cb, cb / ca, p50["A"], p99["A"], p50["B"], p99["B"]
			} else {
				ca = a * tick / (rps["A"] * secs); cb = b * tick / (rps["B"] * secs)
				printf "| %d | %d | %.0f | %.0f | %.3f | %.1f | %.1f | %.3f | %s / %s | %s / %s |\n", phase, run, rps["A"], rps["B"], rps["B"] / rps["A"], ca, cb, cb / ca, p50["A"], p99["A"], p50["B"], p99["B"]
				printf "%.4f\n", rps["B"] / rps["A"] >>tput
			}
			printf "%.4f\n", cb / ca >>ratios
		}' "$work/run.txt"
	done
done
# median FILE prints the median of a file of numbers, one a line.
median() { sort -n "$1" | awk '{v[NR] = $1} END {printf "%.4f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
summary() {
	local m1 m2
	m1=$(median "$work/$1-1") m2=$(median "$work/$1-2")
	awk -v m1="$m1" -v m2="$m2" -v what="$2" 'BEGIN { printf "median B/A %s: %.3f with A started first, %.3f with B first; together (geometric mean) %.3f\n", what, m1, m2, sqrt(m1 * m2) }'
}
summary ratios "CPU per request"
[[ $MODE == closed ]] && summary tput throughput
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
