#!/usr/bin/env bash
# Debian packages the integration tests need: a real Slurm 22.05 (slurmctld, slurmd, slurmdbd, MariaDB,
# munge), Prometheus 2.42 with promtool, slurmrestd, headless Chromium, and Java 17 for Spark (tests marked spark).
# Installs only what is missing; needs root.
set -euo pipefail
pkgs=(slurm-wlm slurmdbd slurmrestd slurm-client mariadb-server munge prometheus chromium openjdk-17-jre-headless)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "system-deps: missing ${missing[*]} and not root; integration tests will be skipped" >&2
    exit 0
  fi
  echo "system-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # policy-rc.d keeps the packages' own services from starting: the tests start their own.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  rm -f /usr/sbin/policy-rc.d
fi
