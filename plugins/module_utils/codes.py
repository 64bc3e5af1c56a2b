# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""The one catalogue of finding codes.

Every failure or warning the collection reports carries a code from CODES. The codes table
of docs/codes.md is rendered from this file (scripts/gen_docs.py) and a unit test keeps the
two equal.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

ERROR = "error"
WARNING = "warning"
INFO = "info"

# code: (severity, when it is reported, what to do)
CODES = {
    "E_CONFIG": (
        ERROR, "a setting has a wrong type or value",
        "Correct the named variable in extra-vars, host_vars or group_vars; the message says what is allowed."),
    "E_UNSUPPORTED": (
        ERROR, "the engine or model cannot do a setting",
        "Change the named setting, or choose the engine the message names as the alternative."),
    "E_CONTEXT": (
        ERROR, "llm_context is beyond the model's window",
        "Lower llm_context to at most llm_model_max_context, or serve a model with a longer window."),
    "E_BECOME": (
        ERROR, "the connecting user cannot become root on the host (sudo refused it or asked for a password none was "
        "given; host, user and sudo's words named): installing packages and Docker Engine, writing /etc/docker and "
        "/opt/gpuserve and the Docker socket need root",
        "Give the connecting user passwordless sudo on the host (USER ALL=(ALL:ALL) NOPASSWD: ALL in a file under "
        "/etc/sudoers.d/), or give its sudo password with -K (--ask-become-pass) or ansible_become_password from "
        "Ansible Vault, or connect as root."),
    "E_VENV": (
        ERROR, "the collection's Python virtualenv could not be made or filled on the host",
        "Install python3-venv (Debian/Ubuntu) on the host, or give host_venv_wheelhouse for a host without PyPI."),
    "E_NO_DRIVER": (
        ERROR, "no NVIDIA driver on the host: no /dev/nvidiactl and no loadable libnvidia-ml (the package named)",
        "Install the driver package the message names (Debian: nvidia-driver from non-free; Ubuntu: "
        "ubuntu-drivers install --gpgpu or nvidia-driver-<version>-server-open) and reboot; the collection reads the "
        "driver, it never installs one."),
    "E_NVML": (
        ERROR, "the NVIDIA driver is there but NVML does not answer (or nvidia-ml-py cannot be loaded)",
        "Repair the NVIDIA driver until nvidia-smi works (after a driver install or upgrade, reboot so that the kernel "
        "module matches the libraries), then rerun."),
    "E_GPU_COUNT": (
        ERROR, "fewer GPUs than llm_gpus names (none at all included)",
        "Set llm_gpus to indices the host has, or check that every GPU is visible to the driver (nvidia-smi -L)."),
    "E_GPU_ARCH": (
        ERROR, "compute capability below 8.9",
        "Use GPUs of compute capability 8.9 or newer (Ada, Hopper, Blackwell) for this engine profile."),
    "E_DRIVER_CUDA": (
        ERROR, "the driver is too old for the image's CUDA",
        "Upgrade the NVIDIA driver to one that supports the image's CUDA version, or pin an image built for an older CUDA."),
    "E_GPU_HEALTH": (
        ERROR, "ECC errors, pending row remaps or retired pages above threshold",
        "Drain the GPU and reset it in a maintenance window (pending remaps need a reset); replace it if errors persist."),
    "E_MIG": (
        ERROR, "MIG mode on",
        "Turn MIG off on the named GPU (nvidia-smi -i N -mig 0, then reset the GPU) in a maintenance window."),
    "E_GPU_MEMORY": (
        ERROR, "less than preflight_min_free_mib free on a GPU",
        "Free memory on the named GPU (stop the work holding it) or lower preflight_min_free_mib knowingly."),
    "E_GPU_BUSY": (
        ERROR, "another process on a GPU (pids, MiB)",
        "Stop the named processes, or choose other GPUs in llm_gpus."),
    "E_P2P": (
        ERROR, "NVML reports peer access not OK between a pair",
        "Check the driver, the PCIe topology, ACS and IOMMU settings; every GPU pair must support peer access."),
    "E_ACS": (
        ERROR, "ACS redirect on a PCIe bridge between GPUs",
        "Disable ACS on the named bridge (BIOS, or setpci at boot) so peer traffic is not redirected through the root."),
    "E_DOCKER": (
        ERROR, "the Docker daemon does not answer",
        "Start the Docker daemon (systemctl start docker) and check that /var/run/docker.sock answers."),
    "E_NVIDIA_RUNTIME": (
        ERROR, "no NVIDIA container runtime in the daemon",
        "Install the NVIDIA Container Toolkit and run nvidia-ctk runtime configure --runtime=docker, then restart Docker."),
    "E_DOCKER_GROUP": (
        ERROR, "the connecting user is not in the docker group",
        "Add the user to the docker group (usermod -aG docker USER) and log in again."),
    "E_DAEMON_JSON": (
        ERROR, "the Docker daemon's configuration file cannot be read, is not one JSON object, or cannot be written "
        "(file named)",
        "Repair the named file by hand (python3 -m json.tool FILE shows where it breaks) or remove it, or let the "
        "connecting user write it (become); the collection never overwrites a file it cannot read."),
    "E_DOCKER_RESTART": (
        ERROR, "a Docker restart or package change would stop containers the collection does not own (named)",
        "Stop the named containers, or turn live-restore on first (a reload applies it, containers keep running), or "
        "set host_docker_restart: allow."),
    "E_APT_KEY": (
        ERROR, "an apt repository's signing key could not be fetched, or is not the key its pinned fingerprint names, "
        "or the repository is not signed by it (URL and fingerprints named); nothing was installed",
        "Check the key URL and the pinned fingerprint (host_docker_key_fingerprint, host_nvidia_key_fingerprint) "
        "against the vendor's published one; a mirror that signs with its own key needs its key URL and fingerprint."),
    "E_PACKAGES": (
        ERROR, "a package the host stage installs could not be found or installed, or the package lists could not be "
        "fetched (apt's words shown)",
        "Read apt's words shown: check the host's route to the repository (host_proxy), the pinned version "
        "(host_docker_version, host_nvidia_toolkit_version) against the repository, and dpkg's state (dpkg --audit)."),
    "E_PORT_BUSY": (
        ERROR, "the API port is taken",
        "Stop what listens on the port, or choose another llm_port (the front) or llm_engine_port (the engine)."),
    "E_DISK": (
        ERROR, "the disk budget does not fit (figures per filesystem)",
        "Free space on the named filesystem or move the cache paths to one with room."),
    "E_IMAGE": (
        ERROR, "the engine image could not be pulled",
        "Check the image reference and digest and that the host reaches the registry, or load the image from the workstation."),
    "E_PATCH": (
        ERROR, "a patch of the series does not apply (the patch named, and the file for a pulled image's package)",
        "Rebase the named patch onto the pinned commit or the pulled image's package, or pin the commit or image the "
        "series was written for (image_pull_patches: false runs a pulled image as it is)."),
    "E_PATCH_VERSION": (
        ERROR, "the patch series is written for another engine version than the pulled image holds (both named), "
        "or declares none",
        "Pin llm_image to an image of the version the series names, or rework the series for the image's version "
        "and change its '# version:' line in patches/<engine>/series; image_pull_patches: false runs the image as "
        "it is."),
    "E_BUILD": (
        ERROR, "the engine build failed (log end)",
        "Read the end of the build log shown and the full log on the host; fix the cause and rerun the image stage."),
    "E_WEIGHTS": (
        ERROR, "the model folder could not be made or read on the host (path, cause)",
        "Check that the connecting user can write llm_data_dir on the host (or set ansible_become), then rerun the weights stage."),
    "E_AUTH": (
        ERROR, "the Hugging Face token is missing or refused",
        "Put a valid token in Ansible Vault (llm_hf_token) and accept the model's licence on the hub."),
    "E_DOWNLOAD": (
        ERROR, "a weights transfer failed",
        "Check the host's route to the hub or mirror and rerun; finished files are kept and the download resumes."),
    "E_CHECKSUM": (
        ERROR, "a downloaded file's hash is wrong (named)",
        "The file was removed from the cache: rerun the weights stage to fetch it again; check the mirror if it repeats."),
    "E_AUTOTUNE": (
        ERROR, "tuning failed or incomplete; nothing marked ready",
        "Read the log end shown, leave the GPUs idle and rerun with --tags autotune."),
    "E_HEALTH": (
        ERROR, "the engine did not become healthy in time (log end)",
        "Read the log end shown (docker logs on the host); fix the cause or raise the health timeout."),
    "E_SMOKE": (
        ERROR, "the smoke request failed",
        "Read the reply shown; check the served model name, API key and the engine log."),
    "E_ROLLBACK": (
        ERROR, "after a failed change, the previous engine was started again but did not pass the health gate",
        "The host serves nothing now: read both log ends shown (docker logs on the host), fix the cause, and rerun "
        "the service stage."),
    "E_ENDPOINT": (
        ERROR, "verify or bench found no engine answering at the host's endpoint",
        "Bring the host up first (site.yml); check llm_port, llm_host and llm_api_key, and that the engine is LIVE."),
    "E_VERIFY": (
        ERROR, "a verify check that counts failed (counts and first failures in reports/<host>/verify.md)",
        "Read the failures in the report; an exactness failure is an engine or setting problem, a quality one the model's."),
    "E_BENCH": (
        ERROR, "a bench measurement's requests failed",
        "Read the error shown and the engine log (docker logs on the host); lower bench_concurrency or the prompt sizes."),
    "E_ROUTER": (
        ERROR, "the fleet router (llm_routers) did not start, answer, take a worker or pass its health gate",
        "Read the router's log on the router host (docker logs gpuserve-router, gpuserve-router-front); check that "
        "router_port, router_admin_port and router_metrics_port are free there and that the engines answer from it."),
    "W_DRAIN_TIMEOUT": (
        WARNING, "an engine taken out of the router still held requests (running or queued) after "
        "router_drain_timeout, or had not read 0 router_drain_zero_readings times in a row; it was stopped",
        "The requests still running were cut; raise router_drain_timeout to let long streams end."),
    "W_DRAIN_NO_ANSWER": (
        WARNING, "an engine taken out of the router gave the drain no count of its requests (no answer, an error "
        "status, or no count in its /metrics) up to router_drain_timeout; it was stopped without knowing whether "
        "requests still ran",
        "Read the engine's log on the host (docker logs gpuserve-llm-a or -b, by llm_container_name): an engine busy "
        "past 10 s a reading answers late (raise router_drain_timeout); one that hangs or restarts needs a look "
        "before the next roll."),
    "W_ROUTER_UNREACHABLE": (
        WARNING, "a router host of llm_routers could not be reached when a host left or joined the routers (a roll, "
        "a stop): its router did not take the change, and the run went on without it",
        "Nothing, once the router host is back: its keepalived check gives its router the workers the other router "
        "hosts serve (a host added or removed meanwhile as it is there) before it may hold router_vip. Without "
        "llm_api_key, or when no other router host answers it, it puts back the workers it had recorded: run "
        "site.yml --tags router then."),
    "W_AUTOTUNE_SKIPPED": (
        WARNING, "a tune is due but the engine is serving on the host; the new setup starts untuned",
        "Stop the service (playbooks/stop.yml) in a quiet hour and rerun with --tags autotune, then --tags service."),
    "W_POWER": (
        WARNING, "enforced power limit differs from preflight_expected_power_w; never changed",
        "Results may differ from the recipe's; set the limit yourself if you mean to, or set preflight_expected_power_w."),
    "W_PCIE_LINK": (
        WARNING, "link generation or width below the GPU's maximum",
        "Check the slot, riser and BIOS link settings; an idle GPU may train down, so recheck under load."),
    "W_IOMMU": (
        WARNING, "IOMMU in translated (DMA) mode rather than passthrough",
        "Boot with iommu=pt (or turn the IOMMU off) so peer-to-peer traffic is not translated."),
    "W_P2P_UNKNOWN": (
        WARNING, "NVML could not answer a peer-access query for a pair",
        "Check peer access another way (nvidia-smi topo -p2p rw, or a CUDA copy between the pair)."),
    "W_TOOL_MISSING": (
        WARNING, "a check could not run because the host lacks a tool (named)",
        "Install the named tool on the host to have the check run."),
    "W_CHECK_SKIPPED": (
        WARNING, "a check could not be made for want of data (the check, the GPUs or file and why named): NVML did "
        "not answer a query it needs, a file it reads could not be read, or settings validation does not know the "
        "model's shape (its config.json is neither on the workstation nor given by the hub); it neither passed nor "
        "failed",
        "Check what is named another way (nvidia-smi -q -i N, lspci -vv, ss -ltn): a query the GPU or its driver "
        "does not support stays unanswered; a driver that fails one needs repair until nvidia-smi answers it; a "
        "file that cannot be read needs root (become); a model's shape is read from its config.json in the "
        "workstation's Hugging Face cache (hf download ORG/NAME config.json --revision REV) or from the hub "
        "(weights_hf_endpoint; llm_hf_token for a gated repo)."),
    "W_NO_AUTH": (
        WARNING, "a front is bound beyond loopback and asks no key (llm_client_keys and llm_api_key empty)",
        "Set llm_client_keys (from Ansible Vault), or bind llm_host (router_bind) to 127.0.0.1."),
    "W_SHARED_KEY": (
        WARNING, "clients hold the engines' own key: llm_client_keys is empty, so the front takes llm_api_key",
        "Give each client its own key in llm_client_keys (from Ansible Vault): a client key is then revoked by "
        "reloading the fronts (--tags front), with no engine restart, and no client holds the engines' key."),
    "W_ENGINE_PUBLIC": (
        WARNING, "the engine listens on a public or wildcard address (llm_engine_public): its own routes (vLLM's "
        "/invocations, /tokenize, /metrics) answer whoever reaches it, past the front",
        "Bind llm_engine_host to 127.0.0.1, or to a private address the router hosts reach, and set llm_engine_public: "
        "false; keep the engine's port closed to clients by a firewall until then."),
    "E_FRONT": (
        ERROR, "the front (nginx before the engine or the router) did not start, refused its configuration, or does "
        "not answer /health",
        "Read the front's log on the host (docker logs <llm_container_name>-front, or gpuserve-router-front) and check "
        "that llm_port (router_port) is free there; a refused configuration names nginx's own words."),
    "E_TLS": (
        ERROR, "the fronts' TLS cannot be set up: a given certificate, key or CA file (named) is missing, unreadable or "
        "not PEM, the key is not the certificate's, or the collection's CA could not be made on the workstation",
        "Give llm_tls_cert_file (the certificate, then its chain) and llm_tls_key_file (its unencrypted or "
        "vault-encrypted private key) as PEM files on the workstation, or leave both empty for the collection's CA; "
        "the message names the file and what was wrong with it."),
    "E_CERT_EXPIRED": (
        ERROR, "a front's certificate (llm_tls_cert_file) or the collection's CA has expired, or is not valid yet: "
        "clients would refuse the front",
        "Renew the certificate and give the new one in llm_tls_cert_file and llm_tls_key_file; for the collection's "
        "CA, move llm_tls_ca_dir aside and run again (a new CA is made: give clients its ca.crt)."),
    "W_CERT_EXPIRING": (
        WARNING, "a front's certificate (llm_tls_cert_file) or the collection's CA expires within 30 days "
        "(preflight_cert_warn_days; the date is named)",
        "Renew it before that date and run the play again (a reload of the fronts, no engine restart). The "
        "collection's own front certificates are renewed by the play when they come within that window."),
    "W_CERT_NAMES": (
        WARNING, "a given certificate (llm_tls_cert_file) does not name an address clients reach the front at "
        "(named): a client that verifies would refuse it there",
        "Give a certificate whose subjectAltName holds that name or address (or a wildcard that covers it), or reach "
        "the front by a name it holds."),
    "W_WARM_INCOMPLETE": (
        WARNING, "the warm-up before LIVE ran out of its time (service_warm_timeout) before some shapes (named)",
        "The engine serves; the first requests at the named shapes pay for compilation. Raise service_warm_timeout "
        "or warm fewer concurrencies (service_warm_concurrency)."),
    "W_UNKNOWN_SETTING": (
        WARNING, "a variable with a setting's prefix (llm_, or a role's such as preflight_) that the collection does "
        "not know (a typo?)",
        "Check the variable's spelling against docs/settings.md (ansible-doc -t role gpuserve.llm.<role>)."),
    "I_GPU_CHECKS_SKIPPED": (
        INFO, "the profile uses no GPUs (llm_gpus is empty), so the GPU checks did not run",
        "Nothing to do for a CPU profile; set llm_gpus to a list of GPU indices to run them."),
}


def severity(code):
    return CODES[code][0]


def finding(code, subject, message, **details):
    """One finding as data: the role decides what stops a host."""
    if code not in CODES:
        raise KeyError("unknown finding code %s: add it to plugins/module_utils/codes.py" % code)
    sev, _when, fix = CODES[code]
    result = {"code": code, "severity": sev, "subject": subject, "message": message, "fix": fix}
    if details:
        result["details"] = details
    return result


def fail(module, code, subject, message, details=None, shown="", **result):
    """End the module with the finding: msg is "CODE: message" and then `shown` (what the reader
    needs beside it, a log's end); `details` go into the finding, `result` beside it."""
    found = finding(code, subject, message, **(details or {}))
    module.fail_json(msg="%s: %s%s" % (code, message, shown), finding=found, **result)
