"""The one catalogue of codes: SPEC's table is in it, the README's table is rendered from it."""
import os
import re
import subprocess
import sys

from ansible_collections.gpuserve.llm.plugins.module_utils import codes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import codes_table  # noqa: E402

# SPEC.md's codes table: the contract.
SPEC_CODES = {
    "E_CONFIG": "error", "E_UNSUPPORTED": "error", "E_CONTEXT": "error", "E_NVML": "error",
    "E_GPU_COUNT": "error", "E_GPU_ARCH": "error", "E_DRIVER_CUDA": "error", "E_GPU_HEALTH": "error",
    "E_MIG": "error", "E_GPU_MEMORY": "error", "E_GPU_BUSY": "error", "E_P2P": "error", "E_ACS": "error",
    "E_DOCKER": "error", "E_NVIDIA_RUNTIME": "error", "E_DOCKER_GROUP": "error", "E_PORT_BUSY": "error",
    "E_DISK": "error", "E_IMAGE": "error", "E_PATCH": "error", "E_BUILD": "error", "E_AUTH": "error",
    "E_DOWNLOAD": "error", "E_CHECKSUM": "error", "E_AUTOTUNE": "error", "E_HEALTH": "error",
    "E_SMOKE": "error", "W_POWER": "warning", "W_PCIE_LINK": "warning", "W_IOMMU": "warning",
    "W_P2P_UNKNOWN": "warning", "W_TOOL_MISSING": "warning", "W_NO_AUTH": "warning",
    "W_UNKNOWN_SETTING": "warning",
}


def test_every_spec_code_is_in_the_catalogue_with_its_severity():
    assert {c: codes.CODES[c][0] for c in SPEC_CODES if c in codes.CODES} == SPEC_CODES


def test_every_code_has_meaning_and_fix_and_a_severity_matching_its_prefix():
    prefix = {"E": codes.ERROR, "W": codes.WARNING, "I": codes.INFO}
    for code, (severity, when, fix) in codes.CODES.items():
        assert re.match(r"^[EWI]_[A-Z0-9_]+$", code), code
        assert severity == prefix[code[0]], code
        assert len(when) > 10 and len(fix) > 20, code


def test_readme_table_is_the_rendered_catalogue():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert codes_table.START in readme and codes_table.END in readme
    assert readme == codes_table.readme_with_table(readme), "run: python3 scripts/codes_table.py --write"
    for code in codes.CODES:
        assert "| `%s` |" % code in readme


def test_finding_refuses_an_unknown_code():
    try:
        codes.finding("E_NOPE", "x", "y")
    except KeyError as e:
        assert "E_NOPE" in str(e)
    else:
        raise AssertionError("an unknown code was accepted")


def test_readme_test_command_is_what_ci_runs():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    command = re.search(r"<!-- test-command -->\s*```sh\n(.+?)\n```", readme, re.S).group(1).strip()
    assert command == "bash tests/run.sh"
    assert "exec %s" % command in ci
    assert subprocess.run(["bash", "-n", os.path.join(ROOT, "tests", "run.sh")], check=False).returncode == 0
