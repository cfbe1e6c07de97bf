#!/usr/bin/env bash
# Installs the servers the tests start (redis-server, etcd, ZooKeeper, PostgreSQL)
# from Debian's packages. Idempotent: it installs only what is missing, and the
# packages' own system services are stopped, since the tests start private
# instances on free loopback ports.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)

if [ ${#need[@]} -eq 0 ]; then
  echo "setup: all servers present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
echo "setup: installing ${need[*]}"
# policy-rc.d keeps the packages from starting their system services.
$SUDO sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "setup: done"
