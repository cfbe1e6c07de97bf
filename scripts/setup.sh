#!/usr/bin/env bash
# Installs the servers the tests start (redis-server, etcd, ZooKeeper, PostgreSQL)
# from Debian's packages, and builds the etcd server the tests run from Go
# modules (Debian's etcd 3.4.23 revokes live leases after a leader stall,
# etcd-io/etcd#15247; it stays as a fallback). Idempotent: it installs and builds only what is missing, and
# the packages' own system services are stopped, since the tests start
# private instances on free loopback ports.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)

if [ ${#need[@]} -eq 0 ]; then
  echo "setup: all Debian packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  echo "setup: installing ${need[*]}"
  # policy-rc.d keeps the packages from starting their system services.
  $SUDO sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  echo "setup: packages installed"
fi

# etcd: the server release that scripts/etcd-server/go.mod pins, built once
# into $(go env GOPATH)/bin/distlock-etcd-<version>, where package
# internal/testserver looks for it (its EtcdVersion must name the same
# version; a test checks). A wrapper module, outside go.work, because
# `go install go.etcd.io/etcd/server/v3@version` refuses etcd's replace
# directives. One to two minutes on two cores when Go's build cache is cold;
# changing the pinned version makes the next run build the new one.
etcd_src="$(cd "$(dirname "$0")/etcd-server" && pwd)"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 } $1 == "require" && $2 == "go.etcd.io/etcd/server/v3" { print $3 }' "$etcd_src/go.mod")"
if [ -z "$etcd_version" ]; then
  echo "setup: no go.etcd.io/etcd/server/v3 requirement in $etcd_src/go.mod" >&2
  exit 1
fi
gopath="$(go env GOPATH)"
gopath="${gopath%%:*}"
etcd_bin="$gopath/bin/distlock-etcd-$etcd_version"
if [ -x "$etcd_bin" ]; then
  echo "setup: etcd $etcd_version present ($etcd_bin)"
else
  echo "setup: building etcd $etcd_version into $etcd_bin"
  mkdir -p "$gopath/bin"
  tmp="$(mktemp "$gopath/bin/.distlock-etcd-build.XXXXXX")"
  # Build beside the target and rename, so that an interrupted build leaves
  # no half-written binary under the name the tests look for.
  if ! (cd "$etcd_src" && GOWORK=off go build -trimpath -buildvcs=false -o "$tmp" .); then
    rm -f "$tmp"
    exit 1
  fi
  if ! "$tmp" --version | grep -qx "etcd Version: ${etcd_version#v}"; then
    echo "setup: the build of $etcd_src does not report etcd ${etcd_version#v}:" >&2
    "$tmp" --version >&2 || true
    rm -f "$tmp"
    exit 1
  fi
  chmod 755 "$tmp"
  mv -f "$tmp" "$etcd_bin"
fi
echo "setup: done"
