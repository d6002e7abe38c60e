# Sourced by the image build scripts: debian_root NAME PACKAGE... makes a
# minimal Debian bookworm in a new folder (debootstrap, from Debian's mirror; no
# container registry), installs the packages without recommends, and sets
# $root to the folder, mounted /proc included. debian_root_done cleans what an
# image does not need and unmounts /proc. The folder goes when the script exits.
debian_root() {
  local name=$1
  shift
  if ! command -v debootstrap >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  root=$(mktemp -d "/tmp/websummoner-$name.XXXXXX")
  trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
  echo "building $name in $root (a few minutes)" >&2
  debootstrap --variant=minbase bookworm "$root" "$mirror" >&2
  cat > "$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SOURCES
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc"
  chroot "$root" apt-get update -qq >&2
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
  chroot "$root" apt-get clean
}

debian_root_done() {
  umount "$root/proc"
  rm -rf "$root/var/lib/apt/lists/"* "$root/usr/share/doc" "$root/usr/share/man" "$root/etc/resolv.conf"
}
