#!/usr/bin/env bash
# Boots Debian's own kernel (bookworm's linux-image-cloud, 6.1) under qemu
# in software emulation and runs tests/vm (the vm_guest checks: netem
# measured on real traffic, run/attach with the connect and packet faults,
# the SYN gate with and without nft_queue) inside it.
#
#   ./scripts/vm.sh x86_64     # qemu-system-x86_64
#   ./scripts/vm.sh aarch64    # qemu-system-aarch64 -M virt (cross build)
#   ./scripts/vm.sh x86_64 netem_delay run_refuse   # only checks named so
#
# The kernel, its modules, busybox-static and the tools netchaos calls
# (tc, ip, nft, iptables-nft and their libraries) come from Debian's
# packages for the guest's architecture, fetched with apt-get download into
# target/vm/ARCH (a private apt state: nothing on the host is installed or
# reconfigured) and unpacked with dpkg -x. The initramfs holds those, the
# netchaos binary and the guest checks; the VM has no network device, and
# the results come back on the serial console, ending with
# `N passed, M failed`. Exits non-zero if any check failed or the VM did
# not finish within NETCHAOS_VM_TIMEOUT seconds (default 1500). The serial
# log is kept in target/vm/ARCH/console.log.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:-x86_64}
shift || true
case "$arch" in
x86_64)
  deb=amd64 triplet=x86_64-linux-gnu target=x86_64-unknown-linux-gnu
  qemu=(qemu-system-x86_64 -machine q35 -cpu max)
  console=ttyS0 ld=/lib64/ld-linux-x86-64.so.2
  qemu_pkg=qemu-system-x86
  ;;
aarch64)
  deb=arm64 triplet=aarch64-linux-gnu target=aarch64-unknown-linux-gnu
  qemu=(qemu-system-aarch64 -machine virt -cpu cortex-a57)
  console=ttyAMA0 ld=/lib/ld-linux-aarch64.so.1
  qemu_pkg=qemu-system-arm
  ;;
*)
  echo "usage: scripts/vm.sh x86_64|aarch64 [CHECK...]" >&2
  exit 2
  ;;
esac

say() { printf '\n== vm.sh %s: %s\n' "$arch" "$*"; }
fail() { echo "vm.sh: $*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

if ! have "${qemu[0]}" || ! have busybox; then
  if [ "$(id -u)" = 0 ] && have apt-get; then
    say "installing $qemu_pkg and busybox-static"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$qemu_pkg" busybox-static >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$qemu_pkg" busybox-static >/dev/null; }
  fi
fi
# Exit 3: a prerequisite is missing and cannot be installed here (test.sh
# skips the stage then, outside CI).
missing() { echo "vm.sh: $*" >&2; exit 3; }
have "${qemu[0]}" || missing "${qemu[0]} not found: apt-get install $qemu_pkg"
have busybox || missing "busybox not found (it packs the initramfs): apt-get install busybox-static"
have readelf || missing "readelf not found (it finds the guest's libraries): apt-get install binutils"
have setpriv || missing "setpriv not found (it ties qemu's life to this script's): apt-get install util-linux"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || missing "$keyring not found: apt-get install debian-archive-keyring"

cache=$PWD/target/vm/$arch
mkdir -p "$cache/debs" "$cache/apt/lists/partial" "$cache/apt/archives/partial"
work=$(mktemp -d)
qemu_pid=
tail_pid=
cleanup() {
  [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null && wait "$qemu_pid" 2>/dev/null
  [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- Debian's packages for the guest's architecture ---------------------
# Bookworm's archive, whatever the host's own sources say: the guest is
# Debian 12 on every host.
for suite in "debian bookworm" "debian bookworm-updates" "debian-security bookworm-security"; do
  echo "deb [signed-by=$keyring] http://deb.debian.org/${suite% *} ${suite#* } main"
done >"$cache/apt/sources.list"
cat >"$cache/apt/apt.conf" <<EOF
APT::Architecture "$deb";
APT::Architectures { "$deb"; };
Dir::Etc::sourcelist "$cache/apt/sources.list";
Dir::Etc::sourceparts "-";
Dir::State "$cache/apt";
Dir::State::Lists "$cache/apt/lists";
Dir::State::status "$cache/apt/status";
Dir::Cache "$cache/apt";
Debug::NoLocking "true";
EOF
touch "$cache/apt/status"
export APT_CONFIG=$cache/apt/apt.conf
root=$cache/root
if [ ! -e "$root/.complete" ]; then
  say "fetching Debian's $deb kernel, busybox and tools (apt-get download)"
  # As root, apt would hand the download to its _apt user, who may not
  # write here.
  sandbox=()
  [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
  apt-get update -qq "${sandbox[@]}"
  kpkg=$(apt-cache depends "linux-image-cloud-$deb" | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  [ -n "$kpkg" ] || fail "cannot find the kernel package behind linux-image-cloud-$deb"
  # The tools and every library they need, by the packages' own depends.
  pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances iproute2 nftables iptables |
    grep -v '^[ <]' | sort -u | grep -vxE 'debconf|cdebconf|dpkg|install-info|tar|libdebian-installer4|libnewt0.52|libslang2|libtextwrap1')
  rm -f "$cache"/debs/*.deb
  (cd "$cache/debs" && apt-get download -qq "${sandbox[@]}" "$kpkg" busybox-static $pkgs)
  rm -rf "$root"
  mkdir -p "$root"
  for d in "$cache"/debs/*.deb; do dpkg -x "$d" "$root"; done
  echo "${kpkg#linux-image-}" >"$root/.complete"
fi
kver=$(cat "$root/.complete")
[ -n "$kver" ] || kver=$(ls "$root/lib/modules" | sort -V | tail -1)
kernel=$root/boot/vmlinuz-$kver
[ -f "$kernel" ] || fail "no kernel in $root/boot"

# --- netchaos and the guest checks ---------------------------------------
say "building netchaos and the guest checks (release, $target)"
source scripts/rust-env.sh
ensure_rust
cargo_target=()
if [ "$arch" = aarch64 ]; then
  ensure_cross || exit 1
  cross_env
  cargo_target=(--target "$target")
fi
cargo build --release --locked "${cargo_target[@]}" --bin netchaos
cargo test --release --locked "${cargo_target[@]}" --test vm_guest --no-run
guest=$(cargo test --release --locked "${cargo_target[@]}" --test vm_guest --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*vm_guest[^"]*\)".*/\1/p' | tail -1)
[ -x "$guest" ] || fail "the vm_guest build has no executable"
bin_dir=target/release
[ "$arch" = aarch64 ] && bin_dir=target/$target/release

# --- the initramfs --------------------------------------------------------
say "packing the initramfs ($kver)"
fs=$work/fs
mkdir -p "$fs"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc,var/run,"lib/$triplet","usr/lib/$triplet"}
cp "$root/bin/busybox" "$fs/bin/busybox"
cp "$bin_dir/netchaos" "$fs/bin/netchaos"
cp "$guest" "$fs/bin/vm_guest"
cp "$root/bin/ip" "$root/sbin/tc" "$fs/usr/sbin/"
cp "$root/usr/sbin/nft" "$fs/usr/sbin/nft"
cp "$root/usr/sbin/xtables-nft-multi" "$fs/usr/sbin/xtables-nft-multi"
for t in iptables ip6tables; do
  for s in "" -restore -save; do ln -s xtables-nft-multi "$fs/usr/sbin/$t$s"; done
done
# Plugins loaded at run time: iptables' matches and targets, tc's netem
# distribution tables.
cp -r "$root/usr/lib/$triplet/xtables" "$fs/usr/lib/$triplet/"
mkdir -p "$fs/usr/lib/$triplet/tc"
cp "$root/usr/lib/$triplet/tc/"*.dist "$fs/usr/lib/$triplet/tc/"
cp -r "$root/etc/iproute2" "$fs/etc/" 2>/dev/null || true
[ -d "$root/usr/share/iproute2" ] && mkdir -p "$fs/usr/share" && cp -r "$root/usr/share/iproute2" "$fs/usr/share/"
echo "root:x:0:0:root:/root:/bin/sh" >"$fs/etc/passwd"
echo "root:x:0:" >"$fs/etc/group"
echo "hosts: files" >"$fs/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$fs/etc/hosts"
: >"$fs/etc/resolv.conf"

# Every shared library the binaries and plugins need, from the package
# tree.
lib_dirs=("$root/lib/$triplet" "$root/usr/lib/$triplet" "$root/lib" "$root/usr/lib")
find_lib() {
  local d
  for d in "${lib_dirs[@]}"; do
    [ -e "$d/$1" ] && { echo "$d/$1"; return; }
  done
  return 1
}
declare -A copied=()
queue=()
while IFS= read -r f; do queue+=("$f"); done < <(find "$fs/bin/netchaos" "$fs/bin/vm_guest" "$fs/sbin" "$fs/usr/sbin" \
  "$fs/usr/lib/$triplet" -type f)
while ((${#queue[@]})); do
  f=${queue[0]}
  queue=("${queue[@]:1}")
  for need in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -n "${copied[$need]:-}" ] && continue
    src=$(find_lib "$need") || fail "no $need (needed by ${f#"$fs"}) in the $deb packages"
    cp -L "$src" "$fs/lib/$triplet/$need"
    copied[$need]=1
    queue+=("$fs/lib/$triplet/$need")
  done
done
mkdir -p "$fs$(dirname "$ld")"
[ -e "$fs$ld" ] || cp -L "$(find_lib "$(basename "$ld")")" "$fs$ld"
# netchaos is linked on this host; the guest has bookworm's glibc.
newest() { readelf -V --wide "$@" 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -1; }
need=$(newest "$fs/bin/netchaos" "$fs/bin/vm_guest")
provided=$(newest "$fs/lib/$triplet/libc.so.6")
if [ "$(printf '%s\n%s\n' "$need" "$provided" | sort -V | tail -1)" != "$provided" ]; then
  fail "netchaos was linked against $need, newer than the guest's glibc ($provided, Debian 12): build on Debian 12 or older"
fi

# The kernel modules of the network stack (netfilter, qdiscs, classifiers,
# actions, veth, ifb) and what they build on; modules.dep is made at boot.
mods=$fs/lib/modules/$kver
mkdir -p "$mods/kernel/drivers/net"
cp "$root/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$mods/" 2>/dev/null || true
for d in net lib crypto; do cp -r "$root/lib/modules/$kver/kernel/$d" "$mods/kernel/"; done
for m in veth ifb dummy; do cp "$root/lib/modules/$kver/kernel/drivers/net/$m.ko" "$mods/kernel/drivers/net/"; done

cat >"$fs/init" <<'EOF'
#!/bin/busybox sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
/bin/busybox mount -t proc proc /proc
/bin/busybox --install -s /bin
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mkdir -p /run/netns /var/run
# The kernel loads modules on demand with busybox's modprobe.
depmod
echo /bin/modprobe >/proc/sys/kernel/modprobe
# Loaded by hand so that it makes no ifb0/ifb1 of its own: the checks
# compare the list of links before and after.
modprobe ifb numifbs=0
ip link set lo up
echo "vm: kernel $(uname -r) $(uname -m), $(grep -c ^processor /proc/cpuinfo) cpus; $(/usr/sbin/tc -V); $(nft -v); $(iptables -V)"
cd /tmp
NETCHAOS_VM_GUEST=1 /bin/vm_guest $(cat /proc/cmdline | sed -n 's/.*checks=\([^ ]*\).*/\1/p' | tr , ' ')
echo "vm: guest exit $?"
poweroff -f
EOF
chmod +x "$fs/init"
initrd=$work/initrd.gz
(cd "$fs" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$initrd")
echo "initramfs: $(du -h "$initrd" | cut -f1)"

# --- boot -----------------------------------------------------------------
checks=$(IFS=,; echo "$*")
say "booting $kver under ${qemu[0]} (software emulation)"
log=$cache/console.log
: >"$log"
# Both timeout and qemu die with their parent, even if this script is
# killed with SIGKILL.
setpriv --pdeathsig KILL timeout "${NETCHAOS_VM_TIMEOUT:-1500}" \
  setpriv --pdeathsig KILL "${qemu[@]}" -smp 2 -m 1024 -nic none \
  -display none -monitor none -serial "file:$log" -no-reboot \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=$console panic=-1 quiet loglevel=4 checks=$checks" </dev/null &
qemu_pid=$!
# Show the console as it comes.
tail -n +1 -f "$log" --pid "$qemu_pid" &
tail_pid=$!
set +e
wait "$qemu_pid"
qrc=$?
set -e
qemu_pid=
sleep 0.2
kill "$tail_pid" 2>/dev/null || true
tail_pid=
result=$(tr -d '\r' <"$log" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1 || true)
if [ -z "$result" ]; then
  fail "the VM ended (qemu exit $qrc) without a result line; console in $log"
fi
echo
echo "vm.sh $arch: $result (kernel $kver)"
case "$result" in
*", 0 failed") exit 0 ;;
*) exit 1 ;;
esac
