# Shared set-up of the bench/*.sh scripts, sourced after `set -euo pipefail`
# from the repository's root: bench_init NAME makes the work directory
# $work (removed at exit) and the array pids, whose processes are stopped at
# exit; port prints a free loopback port; cpu_ticks PID prints a process's
# user+system CPU time in clock ticks.

bench_init() {
	work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-$1.XXXXXX")
	pids=()
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}

bench_cleanup() {
	local rc=$?
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
	exit "$rc"
}

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
