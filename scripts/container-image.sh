#!/usr/bin/env bash
# Local container image for tests that run training ranks inside real containers.
#
#   scripts/container-image.sh install        apt-get podman + runc + debootstrap, write podman's config (root)
#   scripts/container-image.sh build [NAME]   build NAME (default localhost/orch-train:test) from Debian's mirror
#   scripts/container-image.sh check [NAME]   podman run --rm NAME python3 -c 'print(1)'  -> prints "ok"
#
# No container registry is needed: the image is a debootstrap'ed Debian
# (minbase + python3, stdlib only) imported with `podman import`. It does NOT
# contain the orchestrator; tests bind-mount what they run (-v DIR:DIR -w DIR).
# Environment knobs (build):
#   ORCH_IMAGE_NUMPY=1      also install python3-numpy in the image
#   ORCH_IMAGE_MIRROR=URL   Debian mirror (default: first URI in /etc/apt/sources.list*)
#   ORCH_IMAGE_SUITE=NAME   Debian suite (default: VERSION_CODENAME of this host)
# Evidence and the reasons behind the config: docs/evidence/containers.md
set -euo pipefail

IMAGE_DEFAULT=localhost/orch-train:test
CONF=/etc/containers/containers.conf.d/50-orch-testbed.conf
PROG=container-image.sh

die() { echo "$PROG: $*" >&2; exit 1; }
# The most telling line of a log: its last "E:" line, else its last line.
errline() { local l; l=$(grep -E '^E:' "$1" | tail -1) || true; echo "${l:-$(tail -1 "$1")}"; }
need_root() { [[ $(id -u) == 0 ]] || die "$1 must run as root"; }

# Packages, each for one reason (installed with --no-install-recommends):
#   podman       the engine (Debian 12: 4.3.1). Pulls conmon, containers-common and
#                containernetworking-plugins + iptables (default bridge network).
#   runc         OCI runtime. Listed explicitly so apt satisfies podman's "crun | runc"
#                with runc: crun 1.8 fails here (mixed cgroup v1/v2 host).
#   debootstrap  builds the image's root filesystem from Debian's mirror (pulls wget).
#   debian-archive-keyring  lets debootstrap verify the mirror's Release signature.
PACKAGES=(podman runc debootstrap debian-archive-keyring)

has_cap_sys_resource() {
  local eff
  eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
  (( (16#$eff >> 24) & 1 ))
}

# The drop-in podman reads after /usr/share/containers/containers.conf. It is a
# drop-in (containers.conf.d, supported by podman 4.3) so an admin's
# /etc/containers/containers.conf stays untouched. NOTE: a client started with
# CONTAINERS_CONF=FILE reads only FILE (no drop-ins), so such a FILE must repeat these keys.
render_conf() {
  local mgr=cgroupfs
  [[ -d /run/systemd/system ]] && mgr=systemd
  echo "# Written by scripts/container-image.sh install; rewritten on each install."
  echo "[containers]"
  if ! has_cap_sys_resource; then
    # Root here lacks CAP_SYS_RESOURCE, so it cannot raise hard rlimits. podman 4.3
    # asks runc for nofile=1048576 and nproc=1048576 by default, and runc then fails
    # with "error setting rlimit type 7: operation not permitted". Ask for no more
    # than this host's hard limits (podman itself lowers its nproc to 32768).
    local nofile nproc
    nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
    [[ $nofile == unlimited || $nofile -gt 1048576 ]] && nofile=1048576
    [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
    echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
  fi
  echo "[engine]"
  echo "runtime = \"runc\""              # crun fails on this mixed cgroup v1/v2 host
  echo "cgroup_manager = \"$mgr\""       # cgroupfs unless systemd is PID 1
  echo "events_logger = \"file\""        # no journald without systemd
}

cmd_install() {
  need_root install
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    local log; log=$(mktemp)
    # Lock::Timeout: another installer (scripts/slurm-testbed.sh) may hold the dpkg lock.
    if ! { apt-get -o DPkg::Lock::Timeout=600 update -qq &&
           DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
             --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
      local last; last=$(errline "$log"); rm -f "$log"
      die "apt-get install ${missing[*]} failed: $last"
    fi
    rm -f "$log"
  fi
  command -v podman >/dev/null || die "podman not found after install"
  mkdir -p "${CONF%/*}"
  local new; new=$(render_conf)
  [[ -f $CONF && $(cat "$CONF") == "$new" ]] || printf '%s\n' "$new" >"$CONF"
  local got
  got=$(podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Host.EventLogger}}' 2>&1) ||
    die "podman info failed: $(tail -1 <<<"$got")"
  [[ ${got%% *} == runc ]] || die "podman uses runtime '${got%% *}', expected runc ($CONF)"
}

default_mirror() {
  local m
  m=$(grep -hsE '^[[:space:]]*(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources 2>/dev/null |
      grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ') || true
  echo "${m:-http://deb.debian.org/debian}"
}

cmd_build() {
  need_root build
  local name=${1:-$IMAGE_DEFAULT}
  if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
    die "podman/debootstrap missing: run '$0 install' first"
  fi
  if podman image exists "$name"; then
    echo "$name: present ($(podman image inspect --format '{{.Size}}' "$name" | numfmt --to=iec)), not rebuilt"
    return
  fi
  local suite mirror include=python3 t0
  # shellcheck disable=SC1091
  suite=${ORCH_IMAGE_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-}")}
  [[ -n $suite ]] || die "cannot tell the Debian suite (set ORCH_IMAGE_SUITE)"
  mirror=${ORCH_IMAGE_MIRROR:-$(default_mirror)}
  [[ ${ORCH_IMAGE_NUMPY:-0} == 1 ]] && include=python3,python3-numpy
  t0=$(date +%s)
  root=$(mktemp -d /var/tmp/orch-image.XXXXXX)   # globals: the EXIT trap runs after return
  log=$root.log
  trap 'rm -rf "${root:?}" "${log:?}"' EXIT
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" >"$log" 2>&1; then
    die "debootstrap $suite from $mirror failed: $(errline "$log")"
  fi
  # Drop what a test image never needs: package caches and lists, docs, man pages, locales.
  rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
  if ! tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
         -C "$root" -cf - . |
       podman import --quiet --change 'CMD ["python3"]' \
         --change "LABEL org.orch.image=train-test org.orch.packages=$include" - "$name" >"$log" 2>&1; then
    die "podman import failed: $(tail -1 "$log")"
  fi
  echo "$name: built in $(($(date +%s) - t0))s ($include from $mirror $suite," \
    "$(podman image inspect --format '{{.Size}}' "$name" | numfmt --to=iec))"
}

cmd_check() {
  local name=${1:-$IMAGE_DEFAULT} out
  command -v podman >/dev/null || die "podman missing: run '$0 install' first"
  podman image exists "$name" || die "image $name missing: run '$0 build $name' first"
  out=$(podman run --rm "$name" python3 -c 'print(1)' 2>&1) || die "podman run failed: $(tail -1 <<<"$out")"
  [[ $out == 1 ]] || die "podman run printed '$(tail -1 <<<"$out")', expected 1"
  echo ok
}

case ${1:-} in
  install) cmd_install ;;
  build) cmd_build "${2:-}" ;;
  check) cmd_check "${2:-}" ;;
  *) die "usage: $0 install | build [NAME] | check [NAME]" ;;
esac
