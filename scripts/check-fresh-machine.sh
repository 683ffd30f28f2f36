#!/usr/bin/env bash
# Proves that the README's two commands work on a fresh, minimal Debian 12:
# builds a debootstrap --variant=minbase root once (cached as a tarball),
# then for every run unpacks a pristine copy, clones this repository's HEAD
# into it and runs, as root with a clean environment,
#   bash scripts/run-tests.sh   then   bash scripts/run-demo.sh
# A package that scripts/setup.sh forgets shows up here, and not on a
# developer machine where it happens to be installed already.
#
# Usage: bash scripts/check-fresh-machine.sh [--keep] [--only tests|demo]
#                                            [--worktree[=PATH,...]]
#   --keep       keep the temporary root (unmounted) for debugging
#   --only WHAT  run only the tests command or only the demo command
#   --worktree   test the working tree (tracked and untracked, not ignored,
#                files) instead of the committed HEAD; with paths, HEAD with
#                only those paths taken from the working tree
# Environment:
#   MHA_FRESH_ROOT_CACHE  where the base root tarball is kept
#                         (default: ~/.cache/mha-fresh-root)
#   MHA_FRESH_TMPDIR      where the temporary root is unpacked; it needs a few
#                         GB and must not be noexec (default: /var/tmp)
# Needs root (debootstrap, mount, chroot): re-runs itself with sudo otherwise.
# The only network it needs is the Debian package mirror of this machine.
set -euo pipefail

usage() { sed -n '10,23s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

args=("$@")
keep=0
only=""
worktree=0
worktree_paths=()
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --only)
      [ $# -ge 2 ] || { usage >&2; exit 2; }
      only="$2"
      shift ;;
    --only=*) only="${1#--only=}" ;;
    --worktree) worktree=1 ;;
    --worktree=*)
      worktree=1
      IFS=, read -r -a worktree_paths <<<"${1#--worktree=}" ;;
    -h | --help) usage; exit 0 ;;
    *) echo "check-fresh-machine: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
case "$only" in
  "" | tests | demo) ;;
  *) echo "check-fresh-machine: --only takes 'tests' or 'demo', not '$only'" >&2; exit 2 ;;
esac

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cache_dir="${MHA_FRESH_ROOT_CACHE:-${HOME:-/root}/.cache/mha-fresh-root}"
tmp_parent="${MHA_FRESH_TMPDIR:-/var/tmp}"

# Everything below mounts, chroots and writes root-owned files: rather than
# sprinkling sudo over every line, run the whole script as root. The cache
# stays in the invoking user's home.
if [ "$(id -u)" -ne 0 ]; then
  exec sudo env MHA_FRESH_ROOT_CACHE="$cache_dir" MHA_FRESH_TMPDIR="$tmp_parent" \
    bash "${BASH_SOURCE[0]}" "${args[@]}"
fi

suite=bookworm
# What a user has before reading the README: git (and ca-certificates, to
# clone over https). Everything else must come from scripts/setup.sh.
include=git,ca-certificates
default_mirror=http://deb.debian.org/debian

# ---------------------------------------------------------------- timing
script_start=$(date +%s)
timings=()
phase_name=""
phase_start=0
fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
phase_begin() {
  phase_name="$1"
  phase_start=$(date +%s)
  echo
  echo "==> [$(date +%H:%M:%S)] $phase_name"
}
phase_end() {
  local secs=$(($(date +%s) - phase_start))
  timings+=("$(printf '%-34s %s' "$phase_name" "$(fmt_secs "$secs")")")
  echo "<== $phase_name: $(fmt_secs "$secs")"
  phase_name=""
}

# ---------------------------------------------------------------- clean-up
# Temporary roots to unmount and remove on exit, whatever happened: a bind
# mount of /dev left behind, or an rm -rf that crosses into it, would damage
# the host.
tmp_roots=()

mounts_under() {
  # Mount points at or below $1, deepest first (a child path sorts after its
  # parent, so reverse order unmounts children first).
  awk -v r="$1" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

release_root() {
  local root="$1" signal pid mnt left
  # Processes still running inside the root (started by this script's
  # commands) would keep the mounts busy.
  for signal in TERM KILL; do
    for pid in /proc/[0-9]*; do
      if [ "$(readlink "$pid/root" 2>/dev/null)" = "$root" ]; then
        kill -"$signal" "${pid#/proc/}" 2>/dev/null || true
      fi
    done
    sleep 0.2
  done
  for mnt in $(mounts_under "$root"); do
    umount "$mnt" 2>/dev/null || umount -l "$mnt" || echo "check-fresh-machine: cannot unmount $mnt" >&2
  done
  left="$(mounts_under "$root")"
  if [ -n "$left" ]; then
    echo "check-fresh-machine: still mounted, NOT removing $root:" >&2
    echo "$left" >&2
    return 1
  fi
  if [ "$keep" -eq 1 ] && [ "$root" = "${run_root:-}" ]; then
    echo "check-fresh-machine: kept $root (unmounted; mount /proc, /sys and /dev to chroot into it)"
  else
    rm -rf --one-file-system "$root"
  fi
}

on_exit() {
  local rc=$? root
  set +e
  trap - EXIT INT TERM HUP
  [ -n "$phase_name" ] && phase_end
  phase_begin "clean-up (unmount, remove root)"
  for root in "${tmp_roots[@]}"; do
    [ -d "$root" ] && release_root "$root"
  done
  phase_end
  echo
  echo "Elapsed time per phase:"
  printf '  %s\n' "${timings[@]}"
  printf '  %-34s %s\n' "total" "$(fmt_secs $(($(date +%s) - script_start)))"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- apt sources
# Prints "URI SUITE COMPONENTS..." for every enabled 'deb' source of this
# machine, from deb822 *.sources files and one-line *.list files.
host_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # deb [options] URI SUITE COMPONENTS...
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" && NF >= 3 { $1 = ""; print substr($0, 2) }'
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
      function flush(  n, m, i, j, u, s) {
        if (f["types"] ~ /(^|[ \t])deb([ \t]|$)/ && tolower(f["enabled"]) !~ /^[ \t]*no/) {
          n = split(f["uris"], u, /[ \t]+/); m = split(f["suites"], s, /[ \t]+/)
          for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
            if (u[i] != "" && s[j] != "") print u[i], s[j], f["components"]
        }
        delete f; last = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/   { if (last != "") f[last] = f[last] " " $0; next }
      { key = tolower(substr($0, 1, index($0, ":") - 1)); f[key] = substr($0, index($0, ":") + 1); last = key }
      END { flush() }
    ' "$f"
  done
}

# Sources for the root: this machine's Debian bookworm entries (main,
# updates, security), as a fresh machine on this network would have them.
root_sources="$(host_sources | awk -v s="$suite" '$2 == s || $2 == s "-updates" || $2 == s "-security"' |
  awk '$1 ~ /^(https?|ftp|file):\/\// && !seen[$1 " " $2]++')"
mirror="$(awk -v s="$suite" '$2 == s { print $1; exit }' <<<"$root_sources")"
if [ -z "$mirror" ]; then
  mirror="$default_mirror"
  root_sources="$mirror $suite main"$'\n'"$mirror $suite-updates main"
fi
mirror="${mirror%/}"

# ---------------------------------------------------------------- base root
# The cache name carries the inputs of debootstrap, so changing the package
# list or the mirror builds a new base instead of reusing a stale one.
base_key="$(printf '%s\n' "$suite" minbase "$include" "$mirror" | sha256sum | cut -c1-12)"
base_tar="$cache_dir/$suite-minbase-$base_key.tar.gz"

install_host_tools() {
  command -v debootstrap >/dev/null && return 0
  echo "check-fresh-machine: installing debootstrap"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # debian-archive-keyring: debootstrap checks the mirror's signatures with it.
  apt-get install -y -qq --no-install-recommends debootstrap debian-archive-keyring
}

build_base() {
  local build
  install_host_tools
  mkdir -p "$tmp_parent"
  build="$(mktemp -d "$tmp_parent/mha-fresh-base.XXXXXX")"
  build="$(realpath "$build")"
  tmp_roots+=("$build")
  # Its hundreds of progress lines go to a log, shown only when it fails.
  if ! debootstrap --variant=minbase --include="$include" --components=main \
    "$suite" "$build" "$mirror" >"$build.log" 2>&1; then
    tail -n 40 "$build.log" >&2
    echo "check-fresh-machine: debootstrap failed (log: $build.log)" >&2
    return 1
  fi
  rm -f "$build.log"
  # Per-run files, written again by every run: the network settings of the
  # machine that built the base must not stick.
  rm -f "$build/etc/resolv.conf" "$build/etc/hostname"
  # Small cache: no downloaded .debs, no package lists (setup.sh runs
  # apt-get update, as it must on a fresh machine).
  rm -rf "$build/var/cache/apt/archives/"*.deb "$build/var/lib/apt/lists/"* \
    "$build/var/cache/apt/"*.bin "$build/var/log/"*.log
  mkdir -p "$cache_dir"
  tar -C "$build" --numeric-owner -czf "$base_tar.part" .
  mv "$base_tar.part" "$base_tar"
  # An older base (other mirror or package list) is of no further use.
  find "$cache_dir" -maxdepth 1 -name "$suite-minbase-*.tar.gz" ! -path "$base_tar" -delete
  release_root "$build"
}

phase_begin "base root (cached)"
mkdir -p "$cache_dir"
# Two runs at once must not both build the base, nor read a half-written one.
exec 9>"$cache_dir/.lock"
flock 9
if [ -f "$base_tar" ]; then
  echo "using $base_tar ($(du -h "$base_tar" | cut -f1))"
else
  phase_name="base root (debootstrap, first run)"
  echo "building $base_tar from $mirror"
  build_base
fi
flock -u 9
exec 9>&-
phase_end

# ---------------------------------------------------------------- this run
phase_begin "unpack pristine root"
mkdir -p "$tmp_parent"
run_root="$(mktemp -d "$tmp_parent/mha-fresh.XXXXXX")"
run_root="$(realpath "$run_root")"
tmp_roots+=("$run_root")
tar -C "$run_root" --numeric-owner -xzf "$base_tar"
# mktemp makes the directory 0700; apt's _apt user must be able to walk /.
chmod 0755 "$run_root"

# apt: this machine's mirror, and the Acquire settings that reaching it needs
# (a proxy; a snapshot mirror's expired Release files).
rm -f "$run_root/etc/apt/sources.list"
awk '{ printf "deb %s %s", $1, $2; for (i = 3; i <= NF; i++) printf " %s", $i; print "" }' \
  <<<"$root_sources" >"$run_root/etc/apt/sources.list"
apt-config dump 2>/dev/null |
  grep -E '^Acquire::(Check-Valid-Until|Check-Date|(http|https|ftp)::Proxy(::[^ ]+)?) ' \
    >"$run_root/etc/apt/apt.conf.d/99mha-fresh-mirror" || true
echo "apt sources:"
sed 's/^/  /' "$run_root/etc/apt/sources.list"
if [ -s "$run_root/etc/apt/apt.conf.d/99mha-fresh-mirror" ]; then
  echo "apt settings from this machine:"
  sed 's/^/  /' "$run_root/etc/apt/apt.conf.d/99mha-fresh-mirror"
else
  rm -f "$run_root/etc/apt/apt.conf.d/99mha-fresh-mirror"
fi

# Name resolution, only if a mirror is named by host name: resolv.conf, and
# the mirror's line of /etc/hosts if this machine pins it there.
needs_dns=0
while read -r uri _; do
  host="${uri#*://}"
  host="${host%%/*}"
  host="${host%:*}"
  case "$uri" in file:*) continue ;; esac
  [[ "$host" =~ ^[0-9.]+$ || "$host" == \[* || "$host" == localhost ]] && continue
  needs_dns=1
  awk -v h="$host" '$1 !~ /^#/ { for (i = 2; i <= NF; i++) if ($i == h) { print; next } }' /etc/hosts \
    >>"$run_root/etc/hosts"
done <<<"$root_sources"
if [ "$needs_dns" -eq 1 ] && [ -f /etc/resolv.conf ]; then
  cp -L /etc/resolv.conf "$run_root/etc/resolv.conf"
fi

# A package's maintainer script must not start a daemon in the root: it would
# outlive the run and keep the mounts busy.
printf '#!/bin/sh\nexit 101\n' >"$run_root/usr/sbin/policy-rc.d"
chmod 0755 "$run_root/usr/sbin/policy-rc.d"
phase_end

phase_begin "clone repository"
clone="$run_root/root/mha"
# The repository may belong to the user who ran sudo.
git -c safe.directory="$repo" clone --quiet --no-hardlinks "$repo" "$clone"
echo "cloned $(git -C "$clone" log -1 --format='%h %s')"
if [ "$worktree" -eq 1 ]; then
  # Overlay the working tree: modified and untracked (not ignored) files,
  # and remove what is deleted there.
  git -c safe.directory="$repo" -C "$repo" ls-files -z --cached --others --exclude-standard \
    -- "${worktree_paths[@]}" |
    tar -C "$repo" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$clone" -xf -
  git -c safe.directory="$repo" -C "$repo" ls-files -z --deleted -- "${worktree_paths[@]}" |
    (cd "$clone" && xargs -0 -r rm -f --)
  echo "working tree copied over HEAD:"
  git -C "$clone" status --short | sed 's/^/  /'
fi
if [ -d "$repo/../shared" ]; then
  cp -a "$repo/../shared" "$run_root/root/shared"
  echo "copied $(cd "$repo/../shared" && pwd -P) to /root/shared"
fi
phase_end

# ---------------------------------------------------------------- mounts
# /proc and /sys: oneTBB and the benchmarks read the CPU count and caches;
# /dev: apt, the compilers and Python need null, urandom, a pty layer and
# POSIX shared memory.
mount -t proc proc "$run_root/proc"
mount -t sysfs -o ro sysfs "$run_root/sys"
mount --bind /dev "$run_root/dev"
mount --bind /dev/pts "$run_root/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$run_root/dev/shm"

# ---------------------------------------------------------------- the commands
run_in_root() {
  # A fresh login's environment, nothing of ours: env -i before chroot.
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM=dumb \
    chroot "$run_root" /bin/bash -c 'cd /root/mha && exec bash "$@"' bash "$@" </dev/null
}

commands=()
[ "$only" != demo ] && commands+=(tests)
[ "$only" != tests ] && commands+=(demo)
failed=()
for what in "${commands[@]}"; do
  phase_begin "bash scripts/run-$what.sh"
  # In the background so that a signal to this script (a CI timeout) runs the
  # clean-up at once instead of after the build: bash waits for a foreground
  # command before it runs a trap, but not for 'wait'.
  run_in_root "scripts/run-$what.sh" &
  if wait $!; then
    phase_end
  else
    rc=$?
    phase_end
    echo "check-fresh-machine: FAILED (exit $rc): bash scripts/run-$what.sh" >&2
    failed+=("bash scripts/run-$what.sh")
  fi
done

echo
if [ ${#failed[@]} -gt 0 ]; then
  failed_list="$(printf '%s, ' "${failed[@]}")"
  echo "check-fresh-machine: FAIL on a fresh Debian 12 root: ${failed_list%, }" >&2
  exit 1
fi
passed="$(printf 'bash scripts/run-%s.sh, ' "${commands[@]}")"
echo "check-fresh-machine: PASS on a fresh Debian 12 root: ${passed%, }"
