#!/usr/bin/env bash
# Measures the latency the gateway itself adds at a fixed request rate, from
# the gateway's own histogram sluice_gateway_added_seconds (each request's
# duration minus its upstream exchange). Unlike a comparison of two proxies'
# end-to-end p99, this is not swamped by the scheduling noise of a load
# generator, a mock and a proxy sharing the same cores.
#
# Environment: CONFIG [bench/gateway.yaml], RATE [1000], DURATION [20s].
# Quantiles are read from histogram buckets: each figure is the upper bound of
# the bucket holding that quantile (so it never understates).
set -euo pipefail
CONFIG=${CONFIG:-bench/gateway.yaml}
RATE=${RATE:-1000}
DURATION=${DURATION:-20s}
KEY=sk-sluice-bench
export SLUICE_BENCH_REDIS_URL=${SLUICE_BENCH_REDIS_URL:-redis://127.0.0.1:6379/0}
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_init added
go build -o "$work/sluice" ./cmd/sluice
go build -o "$work/loadgen" ./bench/loadgen
mock_port=$((20000 + RANDOM % 5000))
gw_port=$((25000 + RANDOM % 5000))
"$work/sluice" mock-llm --listen "127.0.0.1:$mock_port" >"$work/mock.log" 2>&1 &
pids+=($!)
"$work/loadgen" -wait "http://127.0.0.1:$mock_port/healthz"
SLUICE_BENCH_UPSTREAM="http://127.0.0.1:$mock_port" \
	"$work/sluice" gateway --config "$CONFIG" --listen "127.0.0.1:$gw_port" >"$work/gateway.log" 2>&1 &
pids+=($!)
"$work/loadgen" -wait "http://127.0.0.1:$gw_port/readyz"
"$work/loadgen" -mode open -rate "$RATE" -duration "$DURATION" -label gateway \
	-url "http://127.0.0.1:$gw_port/openai/v1/chat/completions" -H "Authorization: Bearer $KEY" | grep -E '^(requests|latency|RESULT)'
curl -s "http://127.0.0.1:$gw_port/metrics" | grep '^sluice_gateway_added_seconds_bucket' |
	awk -v cfg="$CONFIG" -v rate="$RATE" '
	{ match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5); n[++k] = $NF; b[k] = le }
	END {
		total = n[k]
		split("0.5 0.9 0.99 0.999", qs, " ")
		printf "gateway-added latency (%s, %s req/s, %d requests):", cfg, rate, total
		for (i = 1; i <= 4; i++) {
			for (j = 1; j <= k; j++) if (n[j] >= qs[i] * total) break
			v = b[j]; lbl = (v == "+Inf") ? ">100ms" : sprintf("<= %gus", v * 1e6)
			printf "  p%s %s", qs[i] * 100, lbl
		}
		printf "\n"
	}'
