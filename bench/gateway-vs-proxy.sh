#!/usr/bin/env bash
# Compares the Sluice gateway (api-key-auth + model-access, bench/gateway.yaml)
# with a bare httputil.ReverseProxy (bench/bareproxy) in front of the same mock
# upstream (`sluice mock-llm`), and the mock alone as the ceiling. Everything
# runs on loopback ports of this machine; every run is bounded in time.
#
# For each round, and each mode, the targets are measured back to back:
#   closed: max throughput, $CONNS connections, $DURATION each
#   open:   $RATE req/s on a fixed schedule, $DURATION each
#   paired: proxy and gateway in one open-loop run, requests alternating, each
#           at $RATE req/s: both see the same moments of CPU contention, so
#           the added latency is read from this run
#   together: proxy and gateway at the same time, one closed loop of
#           $CONNS/2 connections each: their throughput ratio (and each
#           one's CPU time per request) in the same seconds, where a drifting
#           machine moves the closed loops above between runs
# With ROUNDS > 1 the table shows the median of the rounds for every figure.
#
# Environment (defaults in brackets): DURATION [20s], WARMUP [3s], CONNS [64],
# RATE [1000], ROUNDS [1], DIRECT [1: also measure the mock alone],
# KEEP [empty: a directory to keep logs, raw results and profiles in],
# GATEWAY [cli: `sluice gateway`; inproc: bench/gatewayprof, the same
# deployment served through the gateway package's API, with pprof],
# PROFILE [empty; 1 with GATEWAY=inproc: a CPU profile of the gateway during
# its closed-loop run, saved as gateway.cpu.pb.gz (with KEEP)],
# CONFIG [bench/gateway.yaml; bench/fullchain.yaml is the DESIGN section 7
# chain on the memory store, bench/fullchain-redis.yaml the same on Redis at
# $SLUICE_BENCH_REDIS_URL (default redis://127.0.0.1:6379/0)],
# NICE [empty; e.g. -10: run everything at that niceness (needs root), so
# other work on a shared machine disturbs the figures less],
# SLUICE [empty: build ./cmd/sluice; a path: serve that sluice binary instead,
# e.g. one built from another commit for an A/B].
# With GATEWAY=cli and a Redis deployment, the gateway's Redis operations per
# request (from its /metrics) are printed at the end.
set -euo pipefail

if [[ -n "${NICE:-}" && -z "${SLUICE_BENCH_NICED:-}" ]]; then
	export SLUICE_BENCH_NICED=1
	exec nice -n "$NICE" "$0" "$@"
fi

DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-3s}
CONNS=${CONNS:-64}
RATE=${RATE:-1000}
ROUNDS=${ROUNDS:-1}
DIRECT=${DIRECT:-1}
CONFIG=${CONFIG:-bench/gateway.yaml}
export SLUICE_BENCH_REDIS_URL=${SLUICE_BENCH_REDIS_URL:-redis://127.0.0.1:6379/0}
KEY=sk-sluice-bench # its hash is in every bench/*.yaml

cd "$(dirname "$0")/.."
. bench/lib.sh # cpu_ticks (this script keeps its own work directory and cleanup, for KEEP)
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
pids=()

cleanup() {
	local rc=$?
	for p in "${pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	if [[ -n "${KEEP:-}" ]]; then
		mkdir -p "$KEEP"
		cp "$work"/*.log "$work"/results.txt "$KEEP"/ 2>/dev/null || true
		cp "$work"/gateway.cpu.pb.gz "$work"/gatewayprof "$KEEP"/ 2>/dev/null || true
		echo "logs and raw results kept in $KEEP"
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building binaries in $work"
if [[ -n "${SLUICE:-}" ]]; then
	cp "$SLUICE" "$work/sluice"
else
	go build -o "$work/sluice" ./cmd/sluice
fi
go build -o "$work/loadgen" ./bench/loadgen
go build -o "$work/bareproxy" ./bench/bareproxy
GATEWAY=${GATEWAY:-cli}
if [[ "$GATEWAY" == inproc ]]; then
	go build -o "$work/gatewayprof" ./bench/gatewayprof
fi

# free_port prints a loopback TCP port nothing listens on (a bash /dev/tcp
# connect that fails means free), below the kernel's ephemeral range so no
# outgoing connection of a busy machine holds it.
used_ports=""
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((10000 + RANDOM % (ephemeral_low - 10000)))
		[[ " $used_ports " == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			used_ports="$used_ports $p"
			echo "$p"
			return 0
		fi
	done
	echo "no free port found" >&2
	return 1
}

mock_port=$(free_port)
gw_port=$(free_port)
proxy_port=$(free_port)

# The mock runs from a copy of its own: a gateway run from the mock's file
# would share its code pages (and the caches' lines of them), an advantage
# the proxy does not have.
cp "$work/sluice" "$work/sluice-mock"
"$work/sluice-mock" mock-llm --listen "127.0.0.1:$mock_port" >"$work/mock.log" 2>&1 &
pids+=($!)
"$work/loadgen" -wait "http://127.0.0.1:$mock_port/healthz"

if [[ "$GATEWAY" == inproc ]]; then
	pprof_port=$(free_port)
	SLUICE_BENCH_UPSTREAM="http://127.0.0.1:$mock_port" \
		"$work/gatewayprof" -config "$CONFIG" -listen "127.0.0.1:$gw_port" \
		-pprof "127.0.0.1:$pprof_port" >"$work/gateway.log" 2>&1 &
else
	SLUICE_BENCH_UPSTREAM="http://127.0.0.1:$mock_port" \
		"$work/sluice" gateway --config "$CONFIG" --listen "127.0.0.1:$gw_port" >"$work/gateway.log" 2>&1 &
fi
pids+=($!)
gw_pid=$!
"$work/bareproxy" -listen "127.0.0.1:$proxy_port" -upstream "http://127.0.0.1:$mock_port" \
	-strip-prefix /openai >"$work/bareproxy.log" 2>&1 &
pids+=($!)
proxy_pid=$!
"$work/loadgen" -wait "http://127.0.0.1:$gw_port/readyz" || {
	cat "$work/gateway.log" >&2
	exit 1
}
"$work/loadgen" -wait "http://127.0.0.1:$proxy_port/healthz"

declare -A url=(
	[mock]="http://127.0.0.1:$mock_port/v1/chat/completions"
	[proxy]="http://127.0.0.1:$proxy_port/openai/v1/chat/completions"
	[gateway]="http://127.0.0.1:$gw_port/openai/v1/chat/completions"
)
targets=(proxy gateway)
if [[ "$DIRECT" == 1 ]]; then
	targets=(mock proxy gateway)
fi

# A short check that every target answers 2xx (the key and chain work)
# before any figure is taken.
for t in "${targets[@]}"; do
	out=$("$work/loadgen" -url "${url[$t]}" -H "Authorization: Bearer $KEY" \
		-mode open -rate 20 -duration 1s -warmup 0s -label "$t")
	if ! grep -q ' errors=0 ' <<<"$out"; then
		echo "$t does not answer the benchmark request with 2xx:" >&2
		echo "$out" >&2
		exit 1
	fi
done

echo
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(go version | cut -d' ' -f3)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); niceness $(nice)"
echo "note: the load generator, the proxy under test and the mock share these cores"
: >"$work/results.txt"
together_pids=()
for round in $(seq 1 "$ROUNDS"); do
	for mode in closed open; do
		for t in "${targets[@]}"; do
			echo
			echo "== round $round: $t, $mode loop"
			args=(-url "${url[$t]}" -H "Authorization: Bearer $KEY" -duration "$DURATION" -warmup "$WARMUP" -label "$t")
			if [[ "$mode" == closed ]]; then
				args+=(-mode closed -c "$CONNS")
			else
				args+=(-mode open -rate "$RATE")
			fi
			prof_pid=""
			if [[ "${PROFILE:-}" == 1 && "$DURATION" =~ ^[0-9]+s$ && "$WARMUP" =~ ^[0-9]+s$ && "$GATEWAY" == inproc && "$t" == gateway && "$mode" == closed && "$round" == 1 ]]; then
				# Profile the middle of the measured run, past the warm-up.
				secs=$(( ${DURATION%s} - 4 ))
				( sleep $(( ${WARMUP%s} + 2 )) &&
					"$work/loadgen" -wait "http://127.0.0.1:$pprof_port/debug/pprof/" >/dev/null &&
					PPROF_TMPDIR="$work" go tool pprof -proto -seconds "$secs" -output "$work/gateway.cpu.pb.gz" \
						"http://127.0.0.1:$pprof_port/debug/pprof/profile" >"$work/pprof.log" 2>&1 ) &
				prof_pid=$!
			fi
			"$work/loadgen" "${args[@]}" | tee "$work/last.txt"
			if [[ -n "$prof_pid" ]]; then
				wait "$prof_pid" || echo "profile failed: $(cat "$work/pprof.log")"
			fi
			grep '^RESULT ' "$work/last.txt" | sed "s/^RESULT /RESULT round=$round /" >>"$work/results.txt"
		done
	done
	echo
	echo "== round $round: proxy and gateway paired, open loop"
	"$work/loadgen" -url "${url[proxy]}" -label proxy -url2 "${url[gateway]}" -label2 gateway \
		-H "Authorization: Bearer $KEY" -mode open -rate "$RATE" -duration "$DURATION" -warmup "$WARMUP" |
		tee "$work/last.txt"
	grep '^RESULT ' "$work/last.txt" | sed -e "s/^RESULT /RESULT round=$round /" -e 's/ mode=open / mode=paired /' >>"$work/results.txt"
	echo
	echo "== round $round: proxy and gateway together, a closed loop of $((CONNS / 2)) connections each"
	g0=$(cpu_ticks "$gw_pid") p0=$(cpu_ticks "$proxy_pid")
	for t in proxy gateway; do
		"$work/loadgen" -url "${url[$t]}" -H "Authorization: Bearer $KEY" -mode closed -c $((CONNS / 2)) \
			-duration "$DURATION" -warmup "$WARMUP" -label "$t" >"$work/together-$t.txt" &
		together_pids+=($!)
	done
	wait "${together_pids[@]}"
	together_pids=()
	g1=$(cpu_ticks "$gw_pid") p1=$(cpu_ticks "$proxy_pid")
	cat "$work/together-proxy.txt" "$work/together-gateway.txt" | grep '^RESULT ' | tee "$work/last.txt" |
		sed -e "s/^RESULT /RESULT round=$round /" -e 's/ mode=closed / mode=together /' >>"$work/results.txt"
	# CPU time per request over warm-up and measured time, the count taken
	# as the measured rate times both.
	awk -v g="$((g1 - g0))" -v p="$((p1 - p0))" -v tick="$((1000000 / $(getconf CLK_TCK)))" -v secs="$(( ${WARMUP%s} + ${DURATION%s} ))" -v round="$round" '
	function field(name,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } return "" }
	/^RESULT / { rps[field("label")] = field("rps") }
	END { printf "CPU round=%d gateway_us=%.1f proxy_us=%.1f\n", round, g * tick / (rps["gateway"] * secs), p * tick / (rps["proxy"] * secs) }' "$work/last.txt" |
		tee -a "$work/results.txt"
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# The table: median over rounds of each figure, per target and mode.
awk -v rate="$RATE" -v conns="$CONNS" -v rounds="$ROUNDS" '
function field(name,   i, kv) {
	for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
	return ""
}
function median(key,   n, i, j, t, a) {
	n = cnt[key]
	if (n == 0) return -1
	for (i = 1; i <= n; i++) a[i] = vals[key, i]
	for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	if (n % 2) return a[(n + 1) / 2]
	return (a[n / 2] + a[n / 2 + 1]) / 2
}
function add(key, v) { cnt[key]++; vals[key, cnt[key]] = v + 0 }
function cell(key,   v) { v = median(key); return v < 0 ? "-" : sprintf("%.0f", v) }
/^CPU / { add("cpu" SUBSEP "gateway", field("gateway_us")); add("cpu" SUBSEP "proxy", field("proxy_us")); add("cpu" SUBSEP "ratio", field("proxy_us") / field("gateway_us")); next }
/^RESULT / && field("mode") == "together" { tr[field("round"), field("label")] = field("rps") }
/^RESULT / {
	t = field("label"); m = field("mode"); seen[t] = 1
	add(t SUBSEP m SUBSEP "rps", field("rps"))
	add(t SUBSEP m SUBSEP "p50", field("p50_us"))
	add(t SUBSEP m SUBSEP "p99", field("p99_us"))
	errs[t] += field("errors")
}
END {
	for (r = 1; r <= rounds; r++) if (tr[r, "proxy"] > 0) add("together" SUBSEP "ratio", tr[r, "gateway"] / tr[r, "proxy"])
	printf "\nResults (median of %d round(s)); latencies in microseconds\n\n", rounds
	printf "| target | closed loop, %d conns: req/s | p50 | p99 | open loop, %d req/s: p50 | p99 | paired, %d req/s each: p50 | p99 | errors (all runs) |\n", conns, rate, rate
	printf "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
	n = split("mock proxy gateway", order, " ")
	for (i = 1; i <= n; i++) {
		t = order[i]; if (!(t in seen)) continue
		printf "| %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", t,
			cell(t SUBSEP "closed" SUBSEP "rps"), cell(t SUBSEP "closed" SUBSEP "p50"), cell(t SUBSEP "closed" SUBSEP "p99"),
			cell(t SUBSEP "open" SUBSEP "p50"), cell(t SUBSEP "open" SUBSEP "p99"),
			cell(t SUBSEP "paired" SUBSEP "p50"), cell(t SUBSEP "paired" SUBSEP "p99"), errs[t]
	}
	ratio = median("gateway" SUBSEP "closed" SUBSEP "rps") / median("proxy" SUBSEP "closed" SUBSEP "rps")
	added = median("gateway" SUBSEP "paired" SUBSEP "p99") - median("proxy" SUBSEP "paired" SUBSEP "p99")
	added50 = median("gateway" SUBSEP "paired" SUBSEP "p50") - median("proxy" SUBSEP "paired" SUBSEP "p50")
	sep = median("gateway" SUBSEP "open" SUBSEP "p99") - median("proxy" SUBSEP "open" SUBSEP "p99")
	printf "\nthroughput ratio gateway/proxy (closed loop): %.2f (target >= 0.80): %s\n", ratio, (ratio >= 0.8 ? "met" : "MISSED")
	if (cnt["gateway" SUBSEP "together" SUBSEP "rps"] > 0) {
		printf "throughput ratio gateway/proxy (both loaded at once, median of the rounds'"'"' ratios): %.3f\n", median("together" SUBSEP "ratio")
		printf "CPU per request, both loaded at once (medians): gateway %.1f us, proxy %.1f us, proxy/gateway %.3f\n", median("cpu" SUBSEP "gateway"), median("cpu" SUBSEP "proxy"), median("cpu" SUBSEP "ratio")
	}
	printf "added p99 at %d req/s (paired run): %.0f us (target < 1000 us): %s\n", rate, added, (added < 1000 ? "met" : "MISSED")
	printf "added p50 at %d req/s (paired run): %.0f us\n", rate, added50
	printf "added p99 at %d req/s (separate runs, noisier): %.0f us\n", rate, sep
}' "$work/results.txt"
if [[ "$GATEWAY" == cli ]]; then
	# Operations the counter store sent to Redis (one per store call that
	# went to Redis, a lease release included; calls merged into one script
	# invocation count one each) per request the gateway served, over the
	# whole run (checks and warm-ups included).
	curl -s --max-time 5 "http://127.0.0.1:$gw_port/metrics" | awk '
	/^sluice_redis_store_op_duration_seconds_count/ { ops += $NF }
	/^sluice_redis_store_reservations_total/ { res += $NF; if ($0 ~ /served="lease"/) leased += $NF }
	/^sluice_requests_total/ { reqs += $NF }
	END {
		if (ops > 0 && reqs > 0)
			printf "redis store: %d operations for %d requests (%.4f per request); %d reservations, %d served from leases\n", ops, reqs, ops / reqs, res, leased
	}'
fi
