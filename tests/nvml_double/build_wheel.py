"""Build the pynvml test double as a wheel (nvml_replay), for installing into test hosts' virtualenvs.

Written by hand (a wheel is a zip with METADATA, WHEEL and RECORD) so that no build backend is
needed offline. Deterministic: same source, same bytes.
"""
import base64
import hashlib
import os
import sys
import zipfile

NAME, VERSION = "nvml_replay", "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(out_dir):
    dist = "%s-%s.dist-info" % (NAME, VERSION)
    with open(os.path.join(HERE, "pynvml.py"), "rb") as f:
        source = f.read()
    files = [
        ("pynvml.py", source),
        (dist + "/METADATA", ("Metadata-Version: 2.1\nName: nvml-replay\nVersion: %s\n"
                              "Summary: TEST DOUBLE of pynvml replaying recorded NVML readings\n" % VERSION).encode()),
        (dist + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: gpuserve-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = "".join("%s,%s,%d\n" % (n, _digest(d), len(d)) for n, d in files) + dist + "/RECORD,,\n"
    files.append((dist + "/RECORD", record.encode()))
    path = os.path.join(out_dir, "%s-%s-py3-none-any.whl" % (NAME, VERSION))
    os.makedirs(out_dir, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    return path


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "."))
