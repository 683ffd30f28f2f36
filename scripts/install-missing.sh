#!/usr/bin/env bash
# Installs the Debian packages given that are not installed yet, with
# apt-get (through sudo when not root); with --arch A first, the foreign
# architecture A is enabled (multiarch), for packages named pkg:A.
# Prints what it installs, or nothing when everything is there.
# usage: install-missing.sh [--arch A] package...
set -euo pipefail

arch=""
if [ "${1:-}" = --arch ]; then
  arch=$2
  shift 2
fi
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "$(basename "$0"): installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
[ -z "$arch" ] || $sudo dpkg --add-architecture "$arch"
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
