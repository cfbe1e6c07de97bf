#!/usr/bin/env bash
# Start, stop or list local servers of every backend for trying distlock:
#   scripts/dev-servers.sh start    # prints each backend's URL and export lines
#   scripts/dev-servers.sh status
#   scripts/dev-servers.sh stop
# It runs `distlock dev-servers` in the background (built from this tree);
# its state (pids, URLs, log, the servers' data) is in $DISTLOCK_DEV_DIR,
# default .dev-servers at the repository's root. Servers get the usual ports
# (redis 6379, redlock 6380-6382, etcd 2379, ZooKeeper 2181, PostgreSQL
# 5432) where free, else free ports; DISTLOCK_DEV_PORTS=any uses free ports
# for all. The servers come from scripts/setup.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
state="${DISTLOCK_DEV_DIR:-$root/.dev-servers}"
ports="${DISTLOCK_DEV_PORTS:-default}"

running() { [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; }

start() {
	if running; then
		echo "already running (pid $(cat "$state/pid")):"
		cat "$state/urls"
		return
	fi
	mkdir -p "$state"
	rm -f "$state/urls" "$state/pid" "$state/pids"
	echo "building distlock..." >&2
	(cd "$root" && go build -o "$state/distlock" ./cmd/distlock)
	echo "starting redis, redlock (3 nodes), etcd, ZooKeeper and PostgreSQL..." >&2
	setsid "$state/distlock" dev-servers --dir "$state/data" --ports "$ports" \
		--pids "$state/pids" --urls "$state/urls" >"$state/log" 2>&1 </dev/null &
	echo $! >"$state/pid"
	for _ in $(seq 1 240); do
		if [ -f "$state/urls" ]; then
			grep -v '^distlock dev-servers: ready' "$state/log" | grep '^distlock dev-servers' >&2 || true
			cat "$state/urls"
			echo "(also in $state/urls; stop with: $0 stop)" >&2
			return
		fi
		if ! running; then
			echo "dev-servers exited; its log ($state/log):" >&2
			cat "$state/log" >&2
			rm -f "$state/pid"
			exit 1
		fi
		sleep 0.5
	done
	echo "servers not ready after 120 s; see $state/log" >&2
	exit 1
}

# killleft kills any server still alive after dev-servers ended (its
# servers die with it on Linux only).
killleft() {
	[ -f "$state/pids" ] || return 0
	while read -r kind spid addr; do
		if kill -0 "$spid" 2>/dev/null; then
			echo "killing $kind (pid $spid, $addr), left running" >&2
			kill -KILL "$spid" 2>/dev/null || true
		fi
	done <"$state/pids"
}

stop() {
	if ! running; then
		echo "not running"
		killleft
		rm -rf "$state"
		return
	fi
	pid="$(cat "$state/pid")"
	kill -TERM "$pid"
	for _ in $(seq 1 60); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" # its servers die with it (Pdeathsig)
	fi
	killleft
	rm -rf "$state"
	echo "stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status)
	if running; then
		echo "running (pid $(cat "$state/pid")):"
		cat "$state/urls" 2>/dev/null || echo "starting"
		if [ -f "$state/pids" ]; then sed 's/^/  server: /' "$state/pids"; fi
	else
		echo "not running"
	fi
	;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 64
	;;
esac
