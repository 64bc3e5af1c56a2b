"""The host virtualenv's packages are pinned once: requirements-host.txt is what host_venv installs."""
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_host_venv_packages_are_requirements_host_txt():
    with open(os.path.join(ROOT, "requirements-host.txt")) as f:
        pins = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    with open(os.path.join(ROOT, "roles", "host_venv", "defaults", "main.yml")) as f:
        defaults = yaml.safe_load(f)
    assert defaults["host_venv_packages"] == pins
    assert all("==" in p for p in pins), "pin every host package"
    assert pins[0].startswith("nvidia-ml-py==")
