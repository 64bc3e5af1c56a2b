"""What a user reads: finding lines, the fleet table, the peer-access grid, each filter's documentation."""
import glob
import importlib
import json
import os
import subprocess
import sys

from ansible_collections.gpuserve.llm.plugins.filter.findings import (
    finding_lines, findings_table, make_finding, p2p_matrix)
from ansible_collections.gpuserve.llm.plugins.filter.tls import tls_findings, tls_subject_alt_names


def test_finding_lines_put_errors_first_and_carry_the_fix():
    findings = [make_finding("W_POWER", "GPU 1", "300 W"), make_finding("E_GPU_BUSY", "GPU 0", "pid 7 (10 MiB)")]
    lines = finding_lines(findings, "gpu-a")
    assert lines[0].startswith("E_GPU_BUSY [error] gpu-a GPU 0: pid 7 (10 MiB). Fix: Stop the named processes")
    assert lines[1].startswith("W_POWER [warning] gpu-a GPU 1: 300 W. Fix:")


def test_fleet_table_rows_per_host_with_status_and_counted_codes():
    report = {
        "b": {"findings": [make_finding("W_POWER", "GPU %d" % i, "x") for i in range(4)]},
        "a": {"findings": [make_finding("W_PCIE_LINK", "GPU 0", "x"), make_finding("E_P2P", "GPU pair 0->1", "x")]},
        "c": {"findings": [], "weights": "dummy"},
        "d": {"reached": False, "findings": [], "weights": "hub"},
    }
    table = findings_table(report)
    assert table[0].split() == ["host", "status", "weights", "findings"]
    assert table[2].split(None, 3) == ["a", "ERROR", "-", "E_P2P, W_PCIE_LINK"]
    assert table[3].split(None, 3) == ["b", "WARN", "-", "W_POWER x4"]
    assert table[4].split() == ["c", "OK", "dummy", "weights", "-"]
    assert table[5].split() == ["d", "NOT", "RUN", "hub", "-"]


def test_p2p_matrix_marks_each_ordered_pair():
    pairs = [{"from": 0, "to": 1, "peer_access": "ok"}, {"from": 1, "to": 0, "peer_access": "unknown"},
             {"from": 0, "to": 2, "peer_access": "not_ok"}]
    grid = p2p_matrix(pairs)
    assert grid[1].split() == ["GPU0", "X", "OK", "NO"]
    assert grid[2].split() == ["GPU1", "?", "X", "-"]


def test_docker_findings():
    from ansible_collections.gpuserve.llm.plugins.filter.findings import docker_findings
    sock = "unix:///var/run/docker.sock"
    down = docker_findings({"failed": True, "msg": "Error connecting: No such file"}, sock, True)
    assert [f["code"] for f in down] == ["E_DOCKER"] and "No such file" in down[0]["message"]
    plain = {"host_info": {"Runtimes": {"runc": {}, "io.containerd.runc.v2": {}}}}
    gpu = docker_findings(plain, sock, True)
    assert [f["code"] for f in gpu] == ["E_NVIDIA_RUNTIME"]
    assert "runtimes: io.containerd.runc.v2, runc" in gpu[0]["message"]
    assert docker_findings(plain, sock, False) == []  # a CPU profile needs no nvidia runtime
    assert docker_findings({"host_info": {"Runtimes": {"nvidia": {}, "runc": {}}}}, sock, True) == []
    assert docker_findings({}, sock, True, checked=False) == []
    # A socket that refuses the user is the docker group's finding, not a daemon that is down.
    assert docker_findings({"msg": "Error while fetching server API version: ('Connection aborted.', "
                                   "PermissionError(13, 'Permission denied'))"}, sock, True) == []


def test_the_engine_image_already_on_the_host_is_its_size_from_the_daemon():
    """The disk budget's present bytes at Docker's data root: the largest engine image the collection made (or the
    one llm_image names), never the front's, the router's or someone else's image."""
    from ansible_collections.gpuserve.llm.plugins.filter.findings import engine_image_bytes
    images = [
        {"RepoTags": ["gpuserve/llama.cpp:1-0.7.0-dfsg-2"], "Size": 165_000_000,
         "Labels": {"gpuserve.llm.source": "debian bookworm", "gpuserve.llm.llama-cpp-tools": "0.7.0-dfsg-2"}},
        {"RepoTags": ["gpuserve/front:1.30.6-2"], "Size": 900_000_000, "Labels": {"gpuserve.llm.source": "debian"}},
        {"RepoTags": ["gpuserve/vllm-router:0.1.17"], "Size": 800_000_000,
         "Labels": {"gpuserve.llm.source": "debian", "gpuserve.llm.vllm-router": "0.1.17"}},
        {"RepoTags": ["postgres:16"], "Size": 5_000_000_000, "Labels": None},
    ]
    assert engine_image_bytes({"images": images}) == 165_000_000
    derived = {"RepoTags": ["gpuserve/vllm:0.26.0-p1"], "Size": 21_000_000_000, "Labels": {"gpuserve.llm.base": "x"}}
    assert engine_image_bytes({"images": images + [derived]}) == 21_000_000_000
    pulled = {"RepoTags": [], "RepoDigests": ["vllm/vllm-openai@sha256:" + "a" * 64], "Size": 19_000_000_000}
    assert engine_image_bytes({"images": images + [pulled]}, "vllm/vllm-openai@sha256:" + "a" * 64) == 19_000_000_000
    assert engine_image_bytes({"images": images + [pulled]}, "vllm/vllm-openai:v0.26.0") == 165_000_000
    # The daemon did not answer, or the check was skipped (no collection virtualenv): nothing is there.
    assert engine_image_bytes({"failed": True, "msg": "no answer"}) == 0
    assert engine_image_bytes({"skipped": True}, "") == 0


def test_every_filter_has_its_own_documentation_page():
    """ansible-doc -t filter gpuserve.llm.<name> shows that filter's page, for every filter of every file."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    names = []
    for path in sorted(glob.glob(os.path.join(root, "plugins", "filter", "*.py"))):
        plugin = importlib.import_module("ansible_collections.gpuserve.llm.plugins.filter."
                                         + os.path.basename(path)[:-3])
        names += sorted(plugin.FilterModule().filters())
    assert len(names) >= 10
    ansible_doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    out = subprocess.run([ansible_doc, "-t", "filter", "--json"] + ["gpuserve.llm." + n for n in names],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False,
                         env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(root, ".collections")))
    pages = json.loads(out.stdout or "{}")
    for name in names:
        page = pages.get("gpuserve.llm." + name)
        assert page, "no page for %s: %s" % (name, out.stderr)
        assert page["doc"]["name"] == name and page["doc"]["filename"].endswith("/%s.yml" % name)
        assert page["doc"]["short_description"] and "_input" in page["doc"]["options"]
        assert "gpuserve.llm.%s" % name in page["examples"] and "_value" in page["return"]


def test_a_fronts_certificate_names_each_address_once_and_no_wildcard_bind():
    assert tls_subject_alt_names(["localhost", "127.0.0.1", "::1", "GPU1", "10.0.0.5", "0.0.0.0", "gpu1", "[fd00::5]",
                                  "", "::"]) == ["DNS:localhost", "IP:127.0.0.1", "IP:::1", "DNS:gpu1", "IP:10.0.0.5",
                                                 "IP:fd00::5"]


def test_a_given_certificate_covers_names_exactly_or_by_one_wildcard_label():
    # The shape of community.crypto.x509_certificate_info's result (valid_at: now, warn).
    cert = {"not_after": "20270301120000Z", "not_before": "20261101000000Z", "expired": False, "public_key": "PK",
            "valid_at": {"now": True, "warn": True}, "subject_alt_name": ["DNS:*.gpu.example", "IP:10.0.0.5"]}
    assert tls_findings(cert, {"public_key": "PK"}, "llm_tls_cert_file f.pem", ["a.gpu.example", "10.0.0.5"]) == []
    [names] = tls_findings(cert, None, "f.pem", ["gpu.example", "a.b.gpu.example", "10.0.0.6", "0.0.0.0"])
    assert names["code"] == "W_CERT_NAMES" and "does not name gpu.example, a.b.gpu.example, 10.0.0.6 (" in names["message"]
    [other] = tls_findings(cert, {"public_key": "ANOTHER"}, "f.pem", [])
    assert other["code"] == "E_TLS" and "is not the key of f.pem" in other["message"]
    [soon] = tls_findings(dict(cert, valid_at={"now": True, "warn": False}), None, "f.pem", [], 30)
    assert soon["code"] == "W_CERT_EXPIRING" and soon["message"] == "f.pem expires on 2027-03-01 12:00 UTC, within 30 days"
    [early] = tls_findings(dict(cert, valid_at={"now": False, "warn": True}), None, "f.pem", [])
    assert early["code"] == "E_CERT_EXPIRED" and "is valid from 2026-11-01 00:00 UTC only" in early["message"]
    [unread] = tls_findings({"failed": True, "msg": "Error loading certificate"}, None, "f.pem", [])
    assert unread["code"] == "E_TLS" and "Error loading certificate" in unread["message"]
