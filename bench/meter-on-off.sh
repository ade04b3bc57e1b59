#!/usr/bin/env bash
# The gateway's throughput with metering on against off, in one run: two
# gateways of the same binary on the same deployment ($CONFIG, default
# bench/fullchain.yaml), one with the meter as a file-configured gateway has
# it when asked for (records to a JSON lines file, sync interval, the access
# log on at info in the text format, to a file), one with
# `meter: {sink: none, accessLog: off}`. Closed-loop runs alternate between
# them, $ROUNDS times, so both see the same moments of contention on a
# shared machine; the table shows every run and the median ratio. Where
# the machine's speed drifts between rounds, `MODE=closed
# bench/gateway-ab.sh` (both gateways loaded at the same time) gives the
# steadier figure.
#
# Environment (defaults in brackets): DURATION [10s], WARMUP [2s], CONNS [64],
# ROUNDS [3], CONFIG [bench/fullchain.yaml], SINK [jsonl; none: the access log
# alone; spool: the platform sink, records to the spool and shipped to
# bench/platformstub, which serves both gateways their deployment (so both
# run as platform gateways) and discards the batches],
# SLUICE [empty: build ./cmd/sluice; a path: that binary],
# EXTRA_ON, EXTRA_OFF [empty: YAML lines added under the meter-on and the
# meter-off deployment's top level, e.g. a tracing section].
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONNS=${CONNS:-64}
ROUNDS=${ROUNDS:-3}
CONFIG=${CONFIG:-bench/fullchain.yaml}
SINK=${SINK:-jsonl}
KEY=sk-sluice-bench

cd "$(dirname "$0")/.."
. bench/lib.sh
bench_init meterbench
declare -A gwpid
# sys_ticks prints its system CPU time alone (the kernel's work for it:
# system calls, page faults).
sys_ticks() { awk '{print $15}' "/proc/$1/stat"; }
# write_calls prints a process's count of write system calls (sockets,
# files, stderr).
write_calls() { awk '$1 == "syscw:" {print $2}' "/proc/$1/io"; }
# minor_faults prints a process's minor page faults (the spool's mapped
# segment takes one when it first writes a page).
minor_faults() { awk '{print $10}' "/proc/$1/stat"; }

if [[ -n "${SLUICE:-}" ]]; then cp "$SLUICE" "$work/sluice"; else go build -o "$work/sluice" ./cmd/sluice; fi
go build -o "$work/loadgen" ./bench/loadgen
[[ "$SINK" == spool ]] && go build -o "$work/platformstub" ./bench/platformstub

mock_port=$(port)
on_port=$(port)
off_port=$(port)
stub_port=$(port)

case "$SINK" in
jsonl) meter_on="meter: {sink: jsonl, jsonl: {path: $work/usage.jsonl}}" ;;
spool) meter_on="meter: {sink: platform}" ;;
*) meter_on="meter: {sink: none}" ;;
esac
{ cat "$CONFIG"; echo "$meter_on"; echo "${EXTRA_ON:-}"; } >"$work/on.yaml"
{ cat "$CONFIG"; echo 'meter: {sink: none, accessLog: "off"}'; echo "${EXTRA_OFF:-}"; } >"$work/off.yaml"
if [[ "$SINK" == spool ]]; then
	# The platform serves rendered documents: no environment expansion.
	for side in on off; do
		sed -i "s|\${SLUICE_BENCH_UPSTREAM}|http://127.0.0.1:$mock_port|g" "$work/$side.yaml"
	done
	"$work/platformstub" -listen "127.0.0.1:$stub_port" -doc "on=$work/on.yaml" -doc "off=$work/off.yaml" >"$work/stub.log" 2>&1 &
	pids+=($!)
	"$work/loadgen" -wait "http://127.0.0.1:$stub_port/healthz"
fi

"$work/sluice" mock-llm --listen "127.0.0.1:$mock_port" >"$work/mock.log" 2>&1 &
pids+=($!)
"$work/loadgen" -wait "http://127.0.0.1:$mock_port/healthz"
for side in on off; do
	p=$on_port
	[[ $side == off ]] && p=$off_port
	if [[ "$SINK" == spool ]]; then
		"$work/sluice" gateway --platform "http://127.0.0.1:$stub_port" --token "$side" --cache "$work/$side-cache" \
			--listen "127.0.0.1:$p" >"$work/$side.out" 2>"$work/$side.log" &
	else
		SLUICE_BENCH_UPSTREAM="http://127.0.0.1:$mock_port" \
			"$work/sluice" gateway --config "$work/$side.yaml" --listen "127.0.0.1:$p" >"$work/$side.out" 2>"$work/$side.log" &
	fi
	pids+=($!)
	gwpid[$side]=$!
	"$work/loadgen" -wait "http://127.0.0.1:$p/readyz" || { cat "$work/$side.log" >&2; exit 1; }
done

echo "machine: $(nproc) cores, $(go version | cut -d' ' -f3); config $CONFIG, sink $SINK"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/results.txt"
# measure runs side's closed-loop round and appends its RESULT line with the
# differences of the gateway's counters over it. The gateway's own CPU per
# request (over warm-up and measured time, at the measured rate) moves far
# less with other work on the machine than the throughput does.
measure() {
	local side=$1 round=$2 p=$on_port pid=${gwpid[$1]}
	[[ $side == off ]] && p=$off_port
	local c0 s0 w0 f0 c1 s1 w1 f1
	c0=$(cpu_ticks "$pid") s0=$(sys_ticks "$pid") w0=$(write_calls "$pid") f0=$(minor_faults "$pid")
	"$work/loadgen" -url "http://127.0.0.1:$p/openai/v1/chat/completions" -H "Authorization: Bearer $KEY" \
		-mode closed -c "$CONNS" -duration "$DURATION" -warmup "$WARMUP" -label "$side" >"$work/last.txt"
	c1=$(cpu_ticks "$pid") s1=$(sys_ticks "$pid") w1=$(write_calls "$pid") f1=$(minor_faults "$pid")
	grep '^RESULT ' "$work/last.txt" | sed "s/^RESULT /RESULT round=$round cpu_ticks=$((c1 - c0)) sys_ticks=$((s1 - s0)) write_calls=$((w1 - w0)) minor_faults=$((f1 - f0)) /" | tee -a "$work/results.txt"
}
for round in $(seq 1 "$ROUNDS"); do
	order=(on off)
	(( round % 2 == 0 )) && order=(off on)
	for side in "${order[@]}"; do
		measure "$side" "$round"
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ "$SINK" == spool ]]; then
	records="$(curl -s "http://127.0.0.1:$stub_port/stub/usage") shipped"
elif [[ -f $work/usage.jsonl ]]; then
	records=$(wc -l <"$work/usage.jsonl")
else
	records=0
fi
echo "access log lines: $(grep -c 'msg=access' "$work/on.log" || true); records: $records"
tick_us=$((1000000 / $(getconf CLK_TCK)))
secs=$(( ${DURATION%s} + ${WARMUP%s} ))
awk -v tick_us="$tick_us" -v secs="$secs" '
function field(name,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } return "" }
/^RESULT / { r = field("round"); l = field("label"); rps[r, l] = field("rps"); cpu[r, l] = field("cpu_ticks") * tick_us / (field("rps") * secs); sys[r, l] = field("sys_ticks") * tick_us / (field("rps") * secs); wr[r, l] = field("write_calls") / (field("rps") * secs); mf[r, l] = field("minor_faults") / (field("rps") * secs); if (r > n) n = r }
function median(a,   i, j, t) {
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
END {
	printf "\n| round | metering on req/s | off req/s | on/off | on: gateway CPU us/req | off | off/on | on: of it system | off | on: write calls/req | off | on: minor faults/req | off |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
	for (r = 1; r <= n; r++) {
		q[r] = rps[r, "on"] / rps[r, "off"]; c[r] = cpu[r, "off"] / cpu[r, "on"]
		printf "| %d | %.0f | %.0f | %.3f | %.1f | %.1f | %.3f | %.1f | %.1f | %.2f | %.2f | %.3f | %.3f |\n", r, rps[r, "on"], rps[r, "off"], q[r], cpu[r, "on"], cpu[r, "off"], c[r], sys[r, "on"], sys[r, "off"], wr[r, "on"], wr[r, "off"], mf[r, "on"], mf[r, "off"]
	}
	printf "median on/off throughput: %.3f; median off/on gateway CPU per request: %.3f\n", median(q), median(c)
}' "$work/results.txt"
