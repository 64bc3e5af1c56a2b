"""Build sysfs / procfs fixture trees the way the kernel lays them out, for the host checks."""
import os
import socket
import struct


def config_space(acs_control=None, size=4096):
    """A PCIe config space: AER at 0x100, then ACS at 0x148 with the given control word."""
    data = bytearray(size)
    struct.pack_into("<HH", data, 0, 0x10DE, 0x1AD0)
    if size > 0x100:
        nxt = 0x148 if acs_control is not None else 0
        struct.pack_into("<I", data, 0x100, 0x0001 | (1 << 16) | (nxt << 20))  # AER
        if acs_control is not None:
            struct.pack_into("<I", data, 0x148, 0x000D | (1 << 16))  # ACS, last capability
            struct.pack_into("<HH", data, 0x14C, 0x005F, acs_control)
    return bytes(data)


def make_sysfs(root, chains, iommu=None):
    """chains: {gpu_bdf: [(bridge_bdf, acs_control or None), ...] from the root down}.

    iommu: {gpu_bdf: "identity" | "DMA" | "DMA-FQ"} gives each GPU an IOMMU group of that type.
    """
    devices = os.path.join(root, "bus", "pci", "devices")
    os.makedirs(devices, exist_ok=True)
    for n, (gpu, bridges) in enumerate(sorted(chains.items())):
        path = os.path.join(root, "devices", "pci0000:00")
        for bridge, control in bridges + [(gpu, None)]:
            path = os.path.join(path, bridge)
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "config"), "wb") as f:
                f.write(config_space(control))
            link = os.path.join(devices, bridge)
            if not os.path.lexists(link):
                os.symlink(os.path.relpath(path, devices), link)
        if iommu and gpu in iommu:
            group = os.path.join(root, "kernel", "iommu_groups", str(n))
            os.makedirs(group, exist_ok=True)
            with open(os.path.join(group, "type"), "w") as f:
                f.write(iommu[gpu] + "\n")
            os.symlink(os.path.relpath(group, path), os.path.join(path, "iommu_group"))
    return root


def make_proc(root, listeners=(), cmdline="BOOT_IMAGE=/vmlinuz root=/dev/sda1"):
    """A procfs with /proc/cmdline and /proc/net/tcp{,6} listing the given (address, port) as LISTEN."""
    os.makedirs(os.path.join(root, "net"), exist_ok=True)
    with open(os.path.join(root, "cmdline"), "w") as f:
        f.write(cmdline + "\n")
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    rows = {"tcp": [], "tcp6": []}
    for i, (addr, port) in enumerate(listeners):
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        raw = socket.inet_pton(family, addr)
        raw = b"".join(raw[j:j + 4][::-1] for j in range(0, len(raw), 4))
        rows["tcp6" if family == socket.AF_INET6 else "tcp"].append(
            "%4d: %s:%04X 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 %d\n"
            % (i, raw.hex().upper(), port, 1000 + i))
    for name, lines in rows.items():
        with open(os.path.join(root, "net", name), "w") as f:
            f.write(header + "".join(lines))
    return root
