"""Host checks on sysfs / procfs fixture trees: ACS, IOMMU, docker group, port, disk."""
import os

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import host_checks
from sysfs_tree import config_space, make_proc, make_sysfs

GPU_A, GPU_B = "0000:17:00.0", "0000:37:00.0"
NVML_A, NVML_B = "00000000:17:00.0", "00000000:37:00.0"


def codes(findings):
    return sorted((f["code"], f["subject"]) for f in findings)


def test_nvml_bus_id_to_sysfs_name():
    assert host_checks.sysfs_bdf("00000000:17:00.0") == "0000:17:00.0"
    assert host_checks.sysfs_bdf("00000001:C1:00.0") == "0001:c1:00.0"
    assert host_checks.sysfs_bdf("17:00.0") == "0000:17:00.0"


def test_acs_control_word_is_found_in_the_extended_capabilities():
    assert host_checks.acs_control(config_space(0x001D)) == 0x001D
    assert host_checks.acs_control(config_space(None)) is None
    assert host_checks.acs_flags(0x001D) == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    with pytest.raises(ValueError):
        host_checks.acs_control(config_space(0x001D, size=256))  # what a non-root reader sees


def test_acs_redirect_on_a_switch_port_above_the_gpus_is_e_acs(tmp_path):
    sysfs = make_sysfs(str(tmp_path), {
        GPU_A: [("0000:00:01.0", 0x0000), ("0000:16:00.0", 0x0000), ("0000:16:08.0", 0x001D)],
        GPU_B: [("0000:00:01.0", 0x0000), ("0000:16:00.0", 0x0000), ("0000:16:10.0", 0x0000)],
    })
    findings, facts = host_checks.check_acs(sysfs, [NVML_A, NVML_B])
    assert codes(findings) == [("E_ACS", "PCIe bridge 0000:16:08.0")]
    assert "ACSCtl 001d: SrcValid ReqRedir CmpltRedir UpstreamFwd" in findings[0]["message"]
    assert facts["0000:16:10.0"] == {"acs_control": "0000", "acs_flags": []}
    assert set(facts) == {"0000:00:01.0", "0000:16:00.0", "0000:16:08.0", "0000:16:10.0"}


def test_acs_source_validation_alone_is_not_a_redirect(tmp_path):
    sysfs = make_sysfs(str(tmp_path), {GPU_A: [("0000:00:01.0", 0x0001)], GPU_B: [("0000:00:03.0", None)]})
    findings, facts = host_checks.check_acs(sysfs, [NVML_A, NVML_B])
    assert findings == [] and facts["0000:00:03.0"]["acs_control"] is None


def test_acs_unreadable_config_space_is_w_tool_missing(tmp_path):
    sysfs = make_sysfs(str(tmp_path), {GPU_A: [("0000:00:01.0", 0x001D)], GPU_B: [("0000:00:03.0", 0)]})
    for bridge in ("0000:00:01.0", "0000:00:03.0"):
        path = os.path.join(sysfs, "bus", "pci", "devices", bridge, "config")
        with open(path, "rb") as f:
            head = f.read(256)
        with open(path, "wb") as f:
            f.write(head)
    findings = host_checks.check_acs(sysfs, [NVML_A, NVML_B])[0]
    assert codes(findings) == [("W_TOOL_MISSING", "PCIe config space")]
    assert "as root" in findings[0]["message"]


def test_gpu_missing_from_sysfs_is_w_tool_missing_and_one_gpu_needs_no_acs(tmp_path):
    findings = host_checks.check_acs(str(tmp_path), [NVML_A, NVML_B])[0]
    assert [f["code"] for f in findings] == ["W_TOOL_MISSING", "W_TOOL_MISSING"]
    assert host_checks.check_acs(str(tmp_path), [NVML_A]) == ([], {})


@pytest.mark.parametrize("kind, expected", [("DMA", ["W_IOMMU"] * 2), ("DMA-FQ", ["W_IOMMU"] * 2),
                                            ("identity", []), (None, [])])
def test_iommu_translated_mode_warns(tmp_path, kind, expected):
    iommu = {GPU_A: kind, GPU_B: kind} if kind else None
    sysfs = make_sysfs(str(tmp_path / "sys"), {GPU_A: [("0000:00:01.0", 0)], GPU_B: [("0000:00:03.0", 0)]}, iommu)
    proc = make_proc(str(tmp_path / "proc"), cmdline="root=/dev/sda1 intel_iommu=on")
    findings, facts = host_checks.check_iommu(sysfs, proc, [NVML_A, NVML_B])
    assert [f["code"] for f in findings] == expected
    assert facts["cmdline"] == "intel_iommu=on"
    assert facts["groups"][GPU_A] == kind


def test_docker_group():
    db = {"docker": (998, ["alice"]), "users": (100, [])}
    assert host_checks.check_docker_group("root", 0, [0], 998, db) == []
    assert host_checks.check_docker_group("bob", 1001, [100, 998], 998, db) == []
    bob = host_checks.check_docker_group("bob", 1001, [100], 998, db)
    assert codes(bob) == [("E_DOCKER_GROUP", "user bob")] and "not in the docker group" in bob[0]["message"]
    alice = host_checks.check_docker_group("alice", 1000, [100], 998, db)
    assert "log in again" in alice[0]["message"]
    nogroup = host_checks.check_docker_group("bob", 1001, [100], None, {})
    assert "no docker group" in nogroup[0]["message"]


@pytest.mark.parametrize("listeners, host, busy", [
    ([("0.0.0.0", 8020)], "0.0.0.0", True),
    ([("127.0.0.1", 8020)], "0.0.0.0", True),
    ([("127.0.0.1", 8020)], "10.1.2.3", False),
    ([("::", 8020)], "127.0.0.1", True),
    ([("0.0.0.0", 8021), ("127.0.0.1", 22)], "0.0.0.0", False),
])
def test_port_busy_from_proc_net(tmp_path, listeners, host, busy):
    proc = make_proc(str(tmp_path), listeners)
    findings = host_checks.check_port(proc, host, 8020)
    assert [f["code"] for f in findings] == (["E_PORT_BUSY"] if busy else [])


def test_disk_budget_sums_paths_on_one_filesystem(tmp_path):
    free_gib = os.statvfs(str(tmp_path)).f_bavail * os.statvfs(str(tmp_path)).f_frsize / float(1024 ** 3)
    half = free_gib * 0.6
    budget = [{"what": "checkpoint", "path": str(tmp_path / "hf"), "gib": half},
              {"what": "kernels", "path": str(tmp_path / "cache" / "deep"), "gib": half}]
    findings, facts = host_checks.check_disk(budget)
    assert [f["code"] for f in findings] == ["E_DISK"]
    assert len(facts) == 1 and facts[0]["need_gib"] == pytest.approx(2 * half, abs=0.2)
    assert "checkpoint" in findings[0]["message"] and "kernels" in findings[0]["message"]
    # Each alone fits.
    assert host_checks.check_disk(budget[:1])[0] == []


def test_disk_budget_counts_what_is_already_there(tmp_path):
    weights = tmp_path / "hf"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(os.urandom(3 * 1024 * 1024))
    facts = host_checks.check_disk([{"what": "checkpoint", "path": str(weights), "gib": 0.004}])[1]
    assert facts[0]["items"][0]["present_gib"] >= 0.0029
    assert facts[0]["items"][0]["need_gib"] <= 0.0011


def test_disk_budgets_sharing_a_path_are_added_and_the_present_bytes_counted_once(tmp_path):
    cache = tmp_path / "hf"
    cache.mkdir()
    (cache / "blob").write_bytes(os.urandom(2 * 1024 * 1024))
    facts = host_checks.check_disk([{"what": "checkpoint", "path": str(cache), "gib": 0.003},
                                    {"what": "drafter", "path": str(cache), "gib": 0.001}])[1]
    item = facts[0]["items"][0]
    assert item["what"] == "checkpoint + drafter" and item["budget_gib"] == pytest.approx(0.004)
    assert item["need_gib"] == pytest.approx(0.004 - 2 / 1024.0, abs=0.0005)


def test_present_bytes_given_by_the_caller_stand_for_a_walk_of_the_path(tmp_path):
    """Docker's data root: the engine image's size from the daemon counts as present, not the files under the
    folder (every image's, walked file by file)."""
    root = tmp_path / "docker"
    root.mkdir()
    (root / "layer").write_bytes(os.urandom(3 * 1024 * 1024))  # another image's files: no room for this one
    item = {"what": "engine image", "path": str(root), "gib": 0.004}
    walked = host_checks.check_disk([item])[1][0]["items"][0]
    assert walked["present_gib"] >= 0.0029
    given = host_checks.check_disk([dict(item, present_bytes=0)])[1][0]["items"][0]
    assert given["present_gib"] == 0 and given["need_gib"] == pytest.approx(0.004)
    image = host_checks.check_disk([dict(item, present_bytes=1024 * 1024)])[1][0]["items"][0]
    assert image["need_gib"] == pytest.approx(0.004 - 1 / 1024.0, abs=0.0001)


def test_a_host_check_skipped_for_want_of_data_says_what_and_why(tmp_path):
    """Issue 38 item 4: a port check with no /proc/net/tcp to read, an IOMMU check with the GPU missing from
    sysfs (one GPU: no ACS check to say it) are W_CHECK_SKIPPED naming the check and why, never a pass."""
    proc = str(tmp_path / "proc")
    os.makedirs(proc)
    port = host_checks.check_port(proc, "0.0.0.0", 8020)
    assert codes(port) == [("W_CHECK_SKIPPED", "port 8020")]
    assert port[0]["details"]["check"] == "E_PORT_BUSY"
    assert port[0]["message"].startswith("the port check (E_PORT_BUSY) was not made on port 8020: %s/net/tcp could "
                                         "not be read (" % proc)
    # no tcp6 (IPv6 off) is no IPv6 listener: the check is made on tcp
    make_proc(str(tmp_path / "v4"), [("0.0.0.0", 8020)])
    os.remove(str(tmp_path / "v4" / "net" / "tcp6"))
    assert codes(host_checks.check_port(str(tmp_path / "v4"), "0.0.0.0", 8020)) == [("E_PORT_BUSY", "port 8020")]
    iommu = host_checks.check_iommu(str(tmp_path), proc, [NVML_A])[0]
    assert codes(iommu) == [("W_CHECK_SKIPPED", "GPU %s" % NVML_A)]
    assert "the IOMMU check (W_IOMMU) was not made on GPU %s: no %s in" % (NVML_A, GPU_A) in iommu[0]["message"]
    # an IOMMU group whose type cannot be read (kernels before 5.11 have no type file) is not a pass either
    sysfs = make_sysfs(str(tmp_path / "sys"), {GPU_A: [("0000:00:01.0", 0)]}, {GPU_A: "DMA"})
    type_file = os.path.join(sysfs, "bus", "pci", "devices", GPU_A, "iommu_group", "type")
    os.remove(type_file)
    unread = host_checks.check_iommu(sysfs, proc, [NVML_A])
    assert codes(unread[0]) == [("W_CHECK_SKIPPED", "GPU %s" % NVML_A)] and unread[1]["groups"][GPU_A] == "unknown"
    assert "the IOMMU check (W_IOMMU) was not made on GPU %s: %s could not be read (" % (NVML_A, type_file) in \
        unread[0][0]["message"]
    # two GPUs: the ACS check names each missing one, for both checks; the IOMMU check adds nothing
    assert host_checks.check_iommu(str(tmp_path), proc, [NVML_A, NVML_B])[0] == []
    assert "the ACS and IOMMU checks cannot follow" in host_checks.check_acs(str(tmp_path), [NVML_A, NVML_B])[0][0][
        "message"]
