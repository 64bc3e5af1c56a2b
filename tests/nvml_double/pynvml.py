# -*- coding: utf-8 -*-
"""TEST DOUBLE of nvidia-ml-py's `pynvml`: replays NVML readings from a JSON scenario.

Test plumbing only: it is installed into a test host's virtualenv in place of nvidia-ml-py and
never ships with the collection. The scenario is read at nvmlInit() from $NVML_REPLAY_SCENARIO, else
nvml-replay.json in the virtualenv it is installed in (sys.prefix: one scenario per test host when
several share a machine), else /etc/nvml-replay.json; with none, nvmlInit() fails as on a host
without the NVIDIA driver.

Format: that of tests/fixtures/h200x2-nvml-probe.json (read off a real host), documented with the
extensions in tests/nvml_scenarios/README.md. A value the scenario lacks raises
NVMLError_NotSupported, as NVML does for a query a GPU cannot answer.
"""

import ctypes
import json
import os
import sys

SCENARIO_ENV = "NVML_REPLAY_SCENARIO"
SCENARIO_DEFAULT = "/etc/nvml-replay.json"

NVML_SUCCESS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_UNKNOWN = 999

# As in nvidia-ml-py 13.610.43, including its stray comma: READ is the tuple (0,).
NVML_P2P_CAPS_INDEX_READ = (0,)
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_CAPS_INDEX_ATOMICS = 3
NVML_P2P_CAPS_INDEX_PROP = 4
NVML_P2P_CAPS_INDEX_PCI = 4
NVML_P2P_CAPS_INDEX_UNKNOWN = 5
_CAP_NAMES = {
    0: ("NVML_P2P_CAPS_INDEX_READ",),
    1: ("NVML_P2P_CAPS_INDEX_WRITE",),
    2: ("NVML_P2P_CAPS_INDEX_NVLINK",),
    3: ("NVML_P2P_CAPS_INDEX_ATOMICS",),
    4: ("NVML_P2P_CAPS_INDEX_PCI", "NVML_P2P_CAPS_INDEX_PROP"),
    5: ("NVML_P2P_CAPS_INDEX_UNKNOWN",),
}

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    def __init__(self, value, text=None):
        Exception.__init__(self, value)
        self.value = value
        self.text = text

    def __str__(self):
        return self.text or _ERROR_STRINGS.get(self.value, "NVML error %s" % self.value)


class NVMLError_NotSupported(NVMLError):
    def __init__(self):
        NVMLError.__init__(self, NVML_ERROR_NOT_SUPPORTED)


class NVMLError_DriverNotLoaded(NVMLError):
    def __init__(self):
        NVMLError.__init__(self, NVML_ERROR_DRIVER_NOT_LOADED)


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self):
        NVMLError.__init__(self, NVML_ERROR_LIBRARY_NOT_FOUND)


class NVMLError_Uninitialized(NVMLError):
    def __init__(self):
        NVMLError.__init__(self, NVML_ERROR_UNINITIALIZED)


_state = {"scenario": None}


class _Handle(object):
    def __init__(self, index):
        self.index = index


class _Struct(object):
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _merge(base, patch):
    """Deep merge; a dict patch on a list patches the list's items by index ("0", "1", ...)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = _merge(base[k], v) if k in base else v
        return out
    if isinstance(base, list) and isinstance(patch, dict):
        out = list(base)
        for k, v in patch.items():
            i = int(k)
            out[i] = _merge(out[i], v) if i < len(out) else v
        return out
    return patch


def load_scenario(path):
    with open(path) as f:
        data = json.load(f)
    parent = data.pop("extends", None)
    if parent:
        base = load_scenario(os.path.join(os.path.dirname(os.path.abspath(path)), parent))
        data = _merge(base, data)
    return data


def _scenario():
    if _state["scenario"] is None:
        raise NVMLError_Uninitialized()
    return _state["scenario"]


def _device(handle):
    return _scenario()["devices"][handle.index]


_ERROR_CLASSES = {
    NVML_ERROR_UNINITIALIZED: NVMLError_Uninitialized,
    NVML_ERROR_NOT_SUPPORTED: NVMLError_NotSupported,
    NVML_ERROR_DRIVER_NOT_LOADED: NVMLError_DriverNotLoaded,
    NVML_ERROR_LIBRARY_NOT_FOUND: NVMLError_LibraryNotFound,
}


def _failed(answer):
    """Whether a recorded answer is a failure: the probe's {"nvml_error": text, "code": N} or {"error": text}."""
    return isinstance(answer, dict) and ("nvml_error" in answer or "error" in answer)


def _raise(answer):
    """Raise what a recorded failure says. The probe's {"nvml_error": text, "code": N} is NVML's error N
    (as nvidia-ml-py raises it: its subclass for a known code); {"error": "ArgumentError..."} is the
    binding's ctypes error; any other {"error": text} is NVML's Unknown Error with that text."""
    if "nvml_error" in answer:
        code = answer.get("code", NVML_ERROR_UNKNOWN)
        if code in _ERROR_CLASSES:
            raise _ERROR_CLASSES[code]()
        raise NVMLError(code, answer["nvml_error"])
    if answer["error"].startswith("ArgumentError"):
        raise ctypes.ArgumentError(answer["error"])
    raise NVMLError(NVML_ERROR_UNKNOWN, answer["error"])


def _value(handle, key):
    dev = _device(handle)
    if key not in dev or dev[key] is None:
        raise NVMLError_NotSupported()
    if _failed(dev[key]):
        _raise(dev[key])
    return dev[key]


def nvmlInit():
    candidates = [os.environ.get(SCENARIO_ENV), os.path.join(sys.prefix, "nvml-replay.json"), SCENARIO_DEFAULT]
    path = next((c for c in candidates if c and os.path.exists(c)), None)
    if path is None:
        raise NVMLError_LibraryNotFound()
    data = load_scenario(path)
    failure = data.get("init_error")
    if isinstance(failure, dict):
        _raise(failure)  # {"nvml_error": text, "code": N}: code 12 is no libnvidia-ml, as on a host without a driver
    if failure:
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED, failure)
    _state["scenario"] = data


def nvmlShutdown():
    _scenario()
    _state["scenario"] = None


def nvmlSystemGetDriverVersion():
    return _scenario()["driver"]


def nvmlSystemGetNVMLVersion():
    return _scenario()["nvml_version"]


def _system(key):
    data = _scenario()
    if data.get(key) is None:
        raise NVMLError_NotSupported()
    if _failed(data[key]):
        _raise(data[key])
    return data[key]


def nvmlSystemGetCudaDriverVersion():
    return _system("cuda_driver")


def nvmlSystemGetCudaDriverVersion_v2():
    return _system("cuda_driver")


def nvmlDeviceGetCount():
    return len(_scenario()["devices"])


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(2, "Invalid Argument")
    return _Handle(index)


def nvmlDeviceGetName(handle):
    return _value(handle, "name")


def nvmlDeviceGetUUID(handle):
    return _value(handle, "uuid")


def nvmlDeviceGetPciInfo(handle):
    return _Struct(busId=_value(handle, "pci_bus_id"))


def nvmlDeviceGetMemoryInfo(handle):
    return _Struct(**_value(handle, "memory"))


def nvmlDeviceGetMemoryBusWidth(handle):
    return _value(handle, "memory_bus_width_bits")


def nvmlDeviceGetMaxClockInfo(handle, clock_type):
    return _value(handle, {NVML_CLOCK_MEM: "max_memory_clock_mhz"}.get(clock_type, "max_sm_clock_mhz"))


def nvmlDeviceGetCudaComputeCapability(handle):
    return tuple(_value(handle, "cc"))


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return _value(handle, "power_enforced_mw")


def nvmlDeviceGetPowerManagementLimit(handle):
    return _value(handle, "power_limit_mw")


def nvmlDeviceGetPowerManagementDefaultLimit(handle):
    return _value(handle, "power_default_mw")


def nvmlDeviceGetPowerManagementLimitConstraints(handle):
    return list(_value(handle, "power_constraints_mw"))


def nvmlDeviceGetPowerUsage(handle):
    return _value(handle, "power_usage_mw")


def nvmlDeviceGetMigMode(handle):
    return list(_value(handle, "mig"))


def nvmlDeviceGetTemperature(handle, sensor):
    return _value(handle, "temp")


def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _value(handle, "pcie_gen")


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _value(handle, "pcie_gen_max")


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _value(handle, "pcie_width")


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _value(handle, "pcie_width_max")


def nvmlDeviceGetEccMode(handle):
    return list(_value(handle, "ecc"))


def nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type):
    return _value(handle, "ecc_uncorrected_volatile")


def nvmlDeviceGetRemappedRows(handle):
    return tuple(_value(handle, "remapped_rows"))


def nvmlDeviceGetRetiredPages(handle, cause):
    count = _value(handle, "retired_pages")["double_bit" if cause == 1 else "single_bit"]
    return [0x1000 * (n + 1) for n in range(count)]


def nvmlDeviceGetRetiredPagesPendingStatus(handle):
    pending = _value(handle, "retired_pages").get("pending", 0)
    if pending is None:
        raise NVMLError_NotSupported()
    if _failed(pending):
        _raise(pending)
    return pending


def _procs(handle, kind):
    listed = _value(handle, "procs").get(kind, [])
    if listed is None:
        raise NVMLError_NotSupported()
    if _failed(listed):
        _raise(listed)
    return [_Struct(pid=p["pid"], usedGpuMemory=p.get("usedGpuMemory")) for p in listed]


def nvmlDeviceGetComputeRunningProcesses(handle):
    return _procs(handle, "nvmlDeviceGetComputeRunningProcesses")


def nvmlDeviceGetGraphicsRunningProcesses(handle):
    return _procs(handle, "nvmlDeviceGetGraphicsRunningProcesses")


def _pair(a, b):
    data = _scenario()
    return data.get("p2p", {}).get("%d-%d" % (a.index, b.index)) or data.get("p2p_default") or {}


def nvmlDeviceGetP2PStatus(device1, device2, p2pIndex):
    if not isinstance(p2pIndex, int):
        # What ctypes says for the binding's tuple-valued NVML_P2P_CAPS_INDEX_READ.
        raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
    pair = _pair(device1, device2)
    for name in _CAP_NAMES.get(p2pIndex, ()):
        if name in pair:
            if _failed(pair[name]):
                _raise(pair[name])
            return pair[name]
    raise NVMLError_NotSupported()


def nvmlDeviceGetTopologyCommonAncestor(device1, device2):
    pair = _pair(device1, device2)
    if "topology" not in pair:
        raise NVMLError_NotSupported()
    return pair["topology"]
