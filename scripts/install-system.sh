#!/usr/bin/env bash
# Installs the Debian packages the tests need (Chromium for browser tests, Redis and PostgreSQL
# for the scale-out tests, libfaketime to run serve's clock ahead in the retention tests,
# Prometheus to scrape a console in the metrics tests, nginx and Caddy to run docs/deploy.md's
# proxies in front of a console in the sign-in tests, bubblewrap for the sandboxed servers of
# SPEC 26), only those that are missing. Services are never started here: the test fixtures
# start their own on free ports in temporary folders.
set -eu
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v faketime >/dev/null 2>&1 || need+=(faketime)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v caddy >/dev/null 2>&1 || need+=(caddy)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing system packages: ${need[*]} (install them with your package manager)" >&2
  exit 1
fi
echo "installing system packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian starts nginx and Caddy as services on install where systemd runs; the tests need only
# their programs.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now nginx caddy >/dev/null 2>&1 || true
fi
