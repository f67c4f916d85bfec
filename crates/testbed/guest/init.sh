#!/bin/busybox sh
# Stage 1 of the rverbs test-bed guest: PID 1 from the initramfs (busybox only).
# Mounts the basics, loads the modules, mounts the run share and, for the "host" guest, this
# machine's root; then runs stage 2 (written by the xtask into the run share) and powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /run /tmp
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# /tmp and /run stay on the initramfs (already writable memory): files of the minimal guest's
# payload may live there, at the same paths as on the host.

R=/run/rverbs
off() {
    sync
    poweroff -f
    sleep 10
}
fail() {
    echo "RVERBS-VM-ERROR: $*"
    if grep -q " $R 9p " /proc/mounts; then echo "setup 1" > "$R/status"; fi
    echo "RVERBS-VM-STATUS: setup 1"
    off
}

if grep -q rverbs.probe=1 /proc/cmdline; then
    echo "RVERBS-VM-PROBE-OK"
    off
fi

while read -r m; do
    insmod "/lib/modules/$m" || fail "insmod $m failed"
done < /lib/modules/order

mkdir -p "$R"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 rverbs "$R" ||
    fail "cannot mount the run share (9p tag rverbs)"
[ -f "$R/guest.env" ] || fail "the run share has no guest.env"
. "$R/guest.env"

# The guest has no network beyond its RDMA netdevs, so no name server: a lookup of a name that
# is not in /etc/hosts asks 127.0.0.1, where nobody answers. musl's resolver (our static
# binaries) ignores the ICMP refusal and waits out its timeout, 5 s by default: 1 s, one try.
printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' > /etc/resolv.conf

if [ "$RVERBS_GUEST" = host ]; then
    N=/mnt/host
    mkdir -p "$N"
    mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose host "$N" ||
        fail "cannot mount this machine's root (9p tag host)"
    # Host paths under /tmp or /run that the run needs (the workspace, the target dir) are
    # bound back over the guest's writable tmpfs there.
    i=0
    for p in $RVERBS_HOST_BINDS; do
        mkdir -p "/mnt/keep/$i"
        mount -o bind "$N$p" "/mnt/keep/$i" || fail "cannot bind $p of the host root"
        i=$((i + 1))
    done
    mount -t tmpfs tmpfs "$N/tmp" || fail "cannot mount a tmpfs on /tmp of the host root"
    mount -t tmpfs tmpfs "$N/run" || fail "cannot mount a tmpfs on /run of the host root"
    i=0
    for p in $RVERBS_HOST_BINDS; do
        mkdir -p "$N$p"
        mount -o bind "/mnt/keep/$i" "$N$p" || fail "cannot bind $p back over the tmpfs"
        i=$((i + 1))
    done
    # Name lookups as in the minimal guest (/etc/resolv.conf above), not with this machine's
    # name server, which the guest cannot reach.
    if [ -e "$N/etc/resolv.conf" ]; then
        mount -o bind /etc/resolv.conf "$N/etc/resolv.conf" ||
            fail "cannot bind the guest's resolv.conf over the host's"
    fi
    mount -o rbind /dev "$N/dev" || fail "cannot bind /dev"
    mount -t proc proc "$N/proc" || fail "cannot mount /proc"
    mount -t sysfs sysfs "$N/sys" || fail "cannot mount /sys"
    mkdir -p "$N/tmp/rverbs-vm"
    mount -o bind "$R" "$N/tmp/rverbs-vm" || fail "cannot bind the run share"
    [ -x "$N/bin/sh" ] || fail "the host root has no /bin/sh"
    chroot "$N" /bin/sh /tmp/rverbs-vm/stage2.sh
else
    mkdir -p /tmp/rverbs-vm
    mount -o bind "$R" /tmp/rverbs-vm || fail "cannot bind the run share"
    /bin/sh /tmp/rverbs-vm/stage2.sh
fi
off
