"""GPU preflight checks against replayed NVML readings: one scenario per finding code."""
import ctypes
import importlib.util
import json
import os
import shutil
import tempfile

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import nvml_checks

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = os.path.join(TESTS, "nvml_scenarios")
REAL = os.path.join(TESTS, "fixtures", "h200x2-nvml-probe.json")
RECIPE = dict(gpus=[0, 1, 2, 3], min_free_mib=90000, expected_power_w=250, min_cuda_version="12.8")


@pytest.fixture
def replay(monkeypatch):
    """Load a fresh copy of the pynvml test double reading the given scenario file."""
    def load(path):
        monkeypatch.setenv("NVML_REPLAY_SCENARIO", path)
        spec = importlib.util.spec_from_file_location("pynvml_double", os.path.join(TESTS, "nvml_double", "pynvml.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load


def run(replay, scenario, dev_nodes=None, **overrides):
    """The checks on a scenario; its host's /dev holds the scenario's `dev_nodes` (a driver's when it names none)."""
    params = dict(RECIPE, **overrides)
    path = scenario if os.path.isabs(scenario) else os.path.join(SCENARIOS, scenario)
    nvml = replay(path)
    if "dev_root" in params:
        return nvml_checks.run_checks(nvml, **params)
    if dev_nodes is None:
        dev_nodes = nvml.load_scenario(path).get("dev_nodes", ["nvidiactl"]) if os.path.exists(path) else []
    dev_root = tempfile.mkdtemp(prefix="dev-")
    try:
        for name in dev_nodes:
            open(os.path.join(dev_root, name), "w").close()
        return nvml_checks.run_checks(nvml, dev_root=dev_root, **params)
    finally:
        shutil.rmtree(dev_root)


def codes(findings):
    return sorted((f["code"], f["subject"]) for f in findings)


@pytest.mark.parametrize("scenario, expected", [
    ("rtxpro6000x4-healthy.json", []),
    ("e_gpu_busy.json", [("E_GPU_BUSY", "GPU 0")]),
    ("e_p2p.json", [("E_P2P", "GPU pair 1->2"), ("E_P2P", "GPU pair 2->1")]),
    ("e_gpu_memory.json", [("E_GPU_MEMORY", "GPU 2")]),
    ("w_power.json", [("W_POWER", "GPU %d" % i) for i in range(4)]),
    ("e_gpu_count.json", [("E_GPU_COUNT", "gpus 2,3")]),
    ("e_gpu_count_none.json", [("E_GPU_COUNT", "gpus 0,1,2,3")]),
    ("e_gpu_arch.json", [("E_GPU_ARCH", "GPU %d" % i) for i in range(4)]),
    ("e_driver_cuda.json", [("E_DRIVER_CUDA", "driver 535.183.01")]),
    ("e_gpu_health.json", [("E_GPU_HEALTH", "GPU 1"), ("E_GPU_HEALTH", "GPU 3")]),
    ("e_gpu_health_retired.json", [("E_GPU_HEALTH", "GPU 0")]),
    ("e_mig.json", [("E_MIG", "GPU 0")]),
    ("e_nvml.json", [("E_NVML", "nvml")]),
    ("e_nvml_version_mismatch.json", [("E_NVML", "nvml")]),
    ("e_nvml_no_library.json", [("E_NVML", "nvml")]),
    ("e_no_driver.json", [("E_NO_DRIVER", "NVIDIA driver")]),
    ("w_pcie_link.json", [("W_PCIE_LINK", "GPU 3")]),
    ("w_p2p_unknown.json", [("W_P2P_UNKNOWN", "GPU pair 0->3"), ("W_P2P_UNKNOWN", "GPU pair 0->3")]),
    ("w_p2p_unknown_every_pair.json", [("W_P2P_UNKNOWN", "all 12 GPU pairs")]),
    ("w_check_skipped.json", [("W_CHECK_SKIPPED", "GPU 2")]),
])
def test_each_scenario_gives_exactly_its_codes(replay, scenario, expected):
    _facts, findings = run(replay, scenario)
    assert codes(findings) == sorted(expected)
    for f in findings:
        assert f["fix"] and f["message"] and f["severity"] in ("error", "warning")


def test_every_gpu_code_has_a_scenario():
    gpu_codes = {"E_NO_DRIVER", "E_NVML", "E_GPU_COUNT", "E_GPU_ARCH", "E_DRIVER_CUDA", "E_GPU_HEALTH", "E_MIG",
                 "E_GPU_MEMORY", "E_GPU_BUSY", "E_P2P", "W_POWER", "W_PCIE_LINK", "W_P2P_UNKNOWN", "W_CHECK_SKIPPED"}
    stems = [f.split(".")[0].upper() for f in os.listdir(SCENARIOS)]
    assert [c for c in sorted(gpu_codes) if not any(s.startswith(c) for s in stems)] == []


def test_real_h200_reading_two_gpus_p2p_ok_both_ways(replay):
    facts, findings = run(replay, REAL, gpus=[0, 1], expected_power_w=700)
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert facts["driver_version"] == "580.159.04" and facts["cuda_driver_version"] == "13.0"
    pairs = {p["pair"]: p for p in facts["p2p"]}
    assert sorted(pairs) == ["0-1", "1-0"]
    for pair in pairs.values():
        assert pair["peer_access"] == "ok"
        assert pair["caps"]["write"] == "OK" and pair["caps"]["pci"] == "NOT_SUPPORTED"
        assert "ArgumentError" in pair["caps"]["read"]["error"]
        assert pair["topology"] == "HOSTBRIDGE"
    # The READ query raised on every pair of that host: one warning naming the capability, never E_P2P.
    # The probe recorded no maximum link width, ECC error count, remapped rows or retired pages: each check
    # that needs them says it was not made, on both GPUs at once (issue 38 item 4).
    assert codes(findings) == [("W_CHECK_SKIPPED", "GPUs 0, 1")] * 3 + [("W_P2P_UNKNOWN", "all 2 GPU pairs")]
    assert sorted(f["details"]["check"] for f in findings if f["code"] == "W_CHECK_SKIPPED") == [
        "E_GPU_HEALTH", "E_GPU_HEALTH", "W_PCIE_LINK"]
    findings = [f for f in findings if f["code"] == "W_P2P_UNKNOWN"]
    assert findings[0]["details"]["capability"] == "read" and findings[0]["details"]["pairs"] == ["0-1", "1-0"]
    assert findings[0]["message"].startswith("NVML could not answer the read peer-access query on any of the 2 GPU "
                                             "pairs (ArgumentError: ")
    assert findings[0]["message"].endswith("; the write query answered OK on every pair")
    gpu0 = facts["gpus"][0]
    assert gpu0["memory_total_mib"] == 143771 and gpu0["power_limit_w"] == 700.0
    assert gpu0["compute_capability"] == "9.0" and gpu0["pcie_width_max"] is None


def test_real_h200_reading_warns_power_at_250_not_at_700(replay):
    at_250 = run(replay, REAL, gpus=[0, 1], expected_power_w=250)[1]
    at_700 = run(replay, REAL, gpus=[0, 1], expected_power_w=700)[1]
    assert [f["subject"] for f in at_250 if f["code"] == "W_POWER"] == ["GPU 0", "GPU 1"]
    assert "700 W" in at_250[0]["message"] or any("700 W" in f["message"] for f in at_250)
    assert not [f for f in at_700 if f["code"] == "W_POWER"]


def test_real_h200_busy_reading_names_pid_and_mib(replay, tmp_path):
    reading = json.load(open(REAL))
    busy = reading["busy"]
    reading["devices"][0]["memory"] = busy["gpu0_memory"]
    reading["devices"][0]["procs"] = busy["gpu0_procs"]
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(reading))
    findings = run(replay, str(path), gpus=[0, 1], expected_power_w=700, min_free_mib=140000)[1]
    busy_f = [f for f in findings if f["code"] == "E_GPU_BUSY"]
    assert len(busy_f) == 1 and busy_f[0]["subject"] == "GPU 0"
    assert busy_f[0]["details"]["processes"] == [{"pid": 600, "used_mib": 10850}]
    assert "pid 600 (10850 MiB)" in busy_f[0]["message"]
    mem = [f for f in findings if f["code"] == "E_GPU_MEMORY"]
    assert [f["subject"] for f in mem] == ["GPU 0"] and mem[0]["details"]["free_mib"] == 132297


def test_only_selected_gpus_are_judged(replay):
    facts, findings = run(replay, "e_mig.json", gpus=[1, 2, 3])
    assert findings == []
    assert [g["selected"] for g in facts["gpus"]] == [False, True, True, True]
    assert len(facts["p2p"]) == 6


def test_all_twelve_ordered_pairs_of_four_gpus(replay):
    facts = run(replay, "rtxpro6000x4-healthy.json")[0]
    assert sorted(p["pair"] for p in facts["p2p"]) == sorted(
        "%d-%d" % (a, b) for a in range(4) for b in range(4) if a != b)
    assert all(p["peer_access"] == "ok" for p in facts["p2p"])


def test_binding_tuple_constant_is_not_passed_to_nvml(replay):
    """nvidia-ml-py 13.610.43's READ index is (0,); passing it raises ArgumentError."""
    nvml = replay(os.path.join(SCENARIOS, "rtxpro6000x4-healthy.json"))
    nvml.nvmlInit()
    h0, h1 = nvml.nvmlDeviceGetHandleByIndex(0), nvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(ctypes.ArgumentError):
        nvml.nvmlDeviceGetP2PStatus(h0, h1, nvml.NVML_P2P_CAPS_INDEX_READ)
    facts, findings = run(replay, "rtxpro6000x4-healthy.json")
    assert facts["p2p"][0]["caps"]["read"] == "OK" and findings == []


def test_no_driver_is_e_no_driver_naming_the_package_not_a_traceback(replay, tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    debian = {"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"}
    facts, findings = run(replay, str(tmp_path / "absent.json"), dev_root=str(dev), release=debian)
    assert codes(findings) == [("E_NO_DRIVER", "NVIDIA driver")]
    assert findings[0]["message"] == (
        "no NVIDIA driver on this host (no %s/nvidiactl, and libnvidia-ml cannot be loaded: "
        "NVMLError_LibraryNotFound: NVML Shared Library Not Found): install Debian GNU/Linux 12 (bookworm)'s "
        "nvidia-driver from the non-free component (add non-free and non-free-firmware to the apt sources; apt "
        "install linux-headers-amd64 nvidia-driver firmware-misc-nonfree) and reboot, or a newer driver from "
        "NVIDIA's CUDA repository when the image's CUDA needs one" % dev)
    assert findings[0]["details"]["package"] == "nvidia-driver"
    assert findings[0]["details"]["distribution"] == "debian 12"
    assert "never installs" in findings[0]["fix"] and facts["gpus"] == []
    # The same host with the driver's kernel module loaded: the driver is there, its library is not.
    (dev / "nvidiactl").write_text("")
    findings = run(replay, str(tmp_path / "absent.json"), dev_root=str(dev), release=debian)[1]
    assert codes(findings) == [("E_NVML", "nvml")]
    assert findings[0]["message"].endswith("the kernel module is loaded (%s/nvidiactl) but its libnvidia-ml "
                                           "library is missing" % dev)


def test_a_driver_that_does_not_answer_stays_e_nvml_and_says_why(replay):
    mismatch = run(replay, "e_nvml_version_mismatch.json")[1][0]
    assert mismatch["message"] == ("NVML could not be initialised: NVMLError: RM has detected an NVML/RM version "
                                   "mismatch.")
    unloaded = run(replay, "e_nvml.json")[1][0]
    assert unloaded["message"].startswith("NVML could not be initialised: NVMLError: Driver Not Loaded; no ")
    assert unloaded["message"].endswith("/nvidiactl: the kernel module is not loaded (a reboot after the driver "
                                        "install?)")
    assert "reboot" in unloaded["fix"]


@pytest.mark.parametrize("release, package, named", [
    ({"ID": "ubuntu", "VERSION_ID": "24.04", "PRETTY_NAME": "Ubuntu 24.04.3 LTS"},
     "nvidia-driver-<version>-server-open", "install Ubuntu 24.04.3 LTS's nvidia-driver-<version>-server-open "
                                            "(sudo ubuntu-drivers install --gpgpu picks the version)"),
    ({"ID": "linuxmint", "ID_LIKE": "ubuntu debian", "PRETTY_NAME": "Linux Mint 22"},
     "nvidia-driver-<version>-server-open", "install Linux Mint 22's nvidia-driver-<version>-server-open"),
    ({"ID": "debian", "VERSION_ID": "13"}, "nvidia-driver", "install debian 13's nvidia-driver from the non-free"),
    ({"ID": "rocky", "ID_LIKE": "rhel centos fedora", "PRETTY_NAME": "Rocky Linux 9.4"},
     "the NVIDIA driver", "install the NVIDIA driver for Rocky Linux 9.4"),
    ({}, "the NVIDIA driver", "install the NVIDIA driver for this distribution"),
])
def test_the_driver_package_is_the_distributions(release, package, named):
    got, how = nvml_checks.driver_package(release)
    ending = "when the image's CUDA needs one" if release.get("ID") == "debian" else "reboot"
    assert got == package and how.startswith(named) and how.endswith(ending)


def test_os_release_is_read_from_the_first_file_there(tmp_path):
    (tmp_path / "os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
                                         "# a comment\nVERSION_ID='12'\n")
    got = nvml_checks.os_release((str(tmp_path / "missing"), str(tmp_path / "os-release")))
    assert got == {"PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)", "ID": "debian", "VERSION_ID": "12"}
    assert nvml_checks.os_release((str(tmp_path / "missing"),)) == {}


def test_any_exception_from_a_call_is_recorded_not_raised(replay):
    nvml = replay(os.path.join(SCENARIOS, "rtxpro6000x4-healthy.json"))

    def broken(handle):
        raise RuntimeError("binding exploded")
    nvml.nvmlDeviceGetMemoryInfo = broken
    del nvml.nvmlDeviceGetRemappedRows  # an older binding without the call
    facts, findings = nvml_checks.run_checks(nvml, [0, 1], 90000, 250)
    # no traceback, and the checks those calls feed say they were not made
    assert [(f["code"], f["subject"], f["details"]["what"]) for f in findings] == [
        ("W_CHECK_SKIPPED", "GPUs 0, 1", "free memory"),
        ("W_CHECK_SKIPPED", "GPUs 0, 1", "row remapping and retired pages")]
    assert "RuntimeError: binding exploded" in findings[0]["message"]
    calls = {u["call"] for u in facts["nvml_unanswered"]}
    assert {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetRemappedRows"} <= calls
    assert "memory_free_mib" not in facts["gpus"][0]


def test_own_engine_processes_are_not_busy(replay, tmp_path):
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("0::/system.slice/docker-abc123def456.scope\n")
    findings = run(replay, "e_gpu_busy.json", own_container_ids=["abc123def456"],
                   proc_root=str(tmp_path / "proc"))[1]
    assert findings == []
    findings = run(replay, "e_gpu_busy.json", own_container_ids=["ffff"], proc_root=str(tmp_path / "proc"))[1]
    assert codes(findings) == [("E_GPU_BUSY", "GPU 0")]


def test_cuda_version_forms():
    assert nvml_checks.cuda_version_int("12.8") == 12080
    assert nvml_checks.cuda_version_int("13") == 13000
    assert nvml_checks.cuda_version_text(12090) == "12.9"


def test_a_query_no_pair_answers_is_one_warning_and_the_probes_not_supported_stays_not_supported(replay):
    facts, findings = run(replay, "w_p2p_unknown_every_pair.json")
    assert len(facts["p2p"]) == 12 and all(p["peer_access"] == "ok" for p in facts["p2p"])
    assert all(p["caps"]["read"] == {"error": "NVMLError_NotSupported: Not Supported"} for p in facts["p2p"])
    assert [f["message"] for f in findings] == [
        "NVML could not answer the read peer-access query on any of the 12 GPU pairs "
        "(NVMLError_NotSupported: Not Supported); the write query answered OK on every pair"]
    # Unanswered on some pairs only: a warning per pair and capability, as before.
    _facts, some = run(replay, "w_p2p_unknown.json")
    assert [(f["subject"], f["details"]["capability"]) for f in some] == [("GPU pair 0->3", "read"),
                                                                          ("GPU pair 0->3", "write")]


FAILED = {"nvml_error": "Unknown Error", "code": 999}


@pytest.mark.parametrize("patch, check, what, words", [
    # issue 38: no maximum PCIe width reported - the link check was skipped with no word
    ({"pcie_width_max": None}, "W_PCIE_LINK", "PCIe link width", "the maximum PCIe link width (NVMLError_NotSupported"),
    ({"pcie_gen": FAILED}, "W_PCIE_LINK", "PCIe link generation", "the current PCIe link generation (NVMLError"),
    ({"pcie_gen_max": None, "pcie_width": None}, "W_PCIE_LINK", "PCIe link", "maximum PCIe link generation"),
    ({"cc": None}, "E_GPU_ARCH", "compute capability", "the compute capability"),
    ({"mig": FAILED}, "E_MIG", "MIG mode", "the MIG mode (NVMLError: Unknown Error)"),
    ({"ecc_uncorrected_volatile": None}, "E_GPU_HEALTH", "uncorrected ECC errors", "ECC is off on it"),
    ({"ecc_uncorrected_volatile": None, "ecc": [1, 1]}, "E_GPU_HEALTH", "uncorrected ECC errors",
     "the uncorrected ECC error count"),
    ({"remapped_rows": None}, "E_GPU_HEALTH", "row remapping and retired pages",
     "the remapped rows (NVMLError_NotSupported: Not Supported); nor the retired pages"),
    ({"remapped_rows": None, "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": FAILED}},
     "E_GPU_HEALTH", "pages pending retirement", "NVML did not say whether pages are pending retirement (NVMLError"),
    ({"procs": {"nvmlDeviceGetComputeRunningProcesses": FAILED, "nvmlDeviceGetGraphicsRunningProcesses": []}},
     "E_GPU_BUSY", "other processes", "did not list the compute processes"),
    ({"memory": None}, "E_GPU_MEMORY", "free memory", "the memory"),
    ({"power_enforced_mw": None}, "W_POWER", "power limit", "the enforced power limit"),
    ({"pci_bus_id": None}, "E_ACS", "ACS and IOMMU (host checks)", "the host checks cannot find it in sysfs"),
])
def test_a_check_skipped_for_want_of_data_says_what_and_why(replay, tmp_path, patch, check, what, words):
    """Every GPU check a missing reading skips is W_CHECK_SKIPPED naming the check, the GPU and NVML's answer;
    the other GPUs, which answered, have no finding."""
    with open(os.path.join(SCENARIOS, "rtxpro6000x4-healthy.json")) as f:
        reading = json.load(f)
    reading["devices"][1].update(patch)  # a value, or a failure in its place (extends would patch a list by index)
    path = tmp_path / "skipped.json"
    path.write_text(json.dumps(reading))
    facts, findings = run(replay, str(path))
    assert codes(findings) == [("W_CHECK_SKIPPED", "GPU 1")], findings
    found = findings[0]
    assert found["severity"] == "warning" and found["details"]["check"] == check and found["details"]["what"] == what
    assert found["message"].startswith("the %s check (%s) was not made on GPU 1: " % (what, check))
    assert words in found["message"], found["message"]
    assert set(facts["gpus"][1]["unanswered"]) - set(facts["gpus"][0]["unanswered"])


def test_a_gpu_without_mig_has_its_mig_check_made(replay, tmp_path):
    """NVML's Not Supported for the MIG mode is a GPU without MIG (RTX cards): MIG is off, nothing skipped."""
    path = tmp_path / "no_mig.json"
    path.write_text(json.dumps({"extends": os.path.join(SCENARIOS, "rtxpro6000x4-healthy.json"),
                                "devices": {"1": {"mig": None}}}))
    assert run(replay, str(path))[1] == []


def test_the_same_gap_on_several_gpus_is_one_warning_and_the_driver_cuda_check_says_so_too(replay, tmp_path):
    path = tmp_path / "gaps.json"
    path.write_text(json.dumps({"extends": os.path.join(SCENARIOS, "rtxpro6000x4-healthy.json"), "cuda_driver": None,
                                "devices": dict((str(i), {"pcie_width_max": None}) for i in range(4))}))
    findings = run(replay, str(path))[1]
    assert codes(findings) == [("W_CHECK_SKIPPED", "GPUs 0, 1, 2, 3"), ("W_CHECK_SKIPPED", "driver 580.95.05")]
    cuda = [f for f in findings if f["subject"].startswith("driver")][0]
    assert cuda["details"]["check"] == "E_DRIVER_CUDA"
    assert cuda["message"] == ("the driver's CUDA version was not checked against the image's (CUDA 12.8, "
                               "E_DRIVER_CUDA): NVML did not report the CUDA version the driver supports "
                               "(NVMLError_NotSupported: Not Supported; NVMLError_NotSupported: Not Supported)")
    # no image CUDA to meet (llama.cpp): nothing to check, nothing skipped
    assert codes(run(replay, str(path), min_cuda_version=None)[1]) == [("W_CHECK_SKIPPED", "GPUs 0, 1, 2, 3")]
