"""roles/image/files/apply_series.py: the series applied to a pulled image's installed package (no git), run
here as the derived image's build runs it - python3 with the package's folder on its path."""
import base64
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "roles", "image", "files", "apply_series.py")
VLLM = os.path.join(ROOT, "patches", "vllm")

sys.path.insert(0, os.path.dirname(SCRIPT))
import apply_series  # noqa: E402
from ansible_collections.gpuserve.llm.plugins.module_utils import engines  # noqa: E402

BASE = "".join("line %d\n" % i for i in range(1, 21))


def diff(path, body, old=None, new=None):
    return "diff --git a/%s b/%s\n--- %s\n+++ %s\n%s" % (path, path, old or "a/" + path, new or "b/" + path, body)


@pytest.fixture
def site(tmp_path):
    """A site-packages folder holding the package `eng` 1.2.3 (its dist-info) with one module."""
    root = tmp_path / "site"
    (root / "eng").mkdir(parents=True)
    (root / "eng" / "mod.py").write_text(BASE)
    (root / "eng" / "__pycache__").mkdir()
    (root / "eng" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"old")
    (root / "eng-1.2.3.dist-info").mkdir()
    (root / "eng-1.2.3.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: eng\nVersion: 1.2.3\n")
    return root


def run(site, tmp_path, patches, version="1.2.3", also=None):
    names = []
    for i, text in enumerate(patches, 1):
        name = "%04d-p.patch" % i
        (tmp_path / name).write_text("From: x\nSubject: [PATCH] p\n\n" + text + "-- \n2.39.5\n")
        names.append(name)
    path = os.pathsep.join([str(site)] + ([str(also)] if also else []))
    proc = subprocess.run([sys.executable, SCRIPT, "--package", "eng", "--version", version, "--dir", str(tmp_path)]
                          + names, env=dict(os.environ, PYTHONPATH=path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, check=False)
    found = [line for line in proc.stdout.splitlines() if line.startswith(apply_series.FINDING)]
    return proc, (json.loads(base64.b64decode(found[0][len(apply_series.FINDING):])) if found else None)


def test_hunks_apply_in_order_at_an_offset_and_a_new_file_is_made(site, tmp_path):
    # The first patch's hunk says line 3 where the file has it at line 5 (an offset, as git apply allows).
    first = diff("eng/mod.py", "@@ -1,3 +1,4 @@\n line 3\n+inserted\n line 4\n line 5\n"
                               "@@ -18,3 +19,3 @@\n line 18\n-line 19\n+LINE 19\n line 20\n")
    second = diff("eng/mod.py", "@@ -3,2 +3,2 @@\n line 3\n-inserted\n+INSERTED\n") + \
        diff("eng/new.py", "@@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n", old="/dev/null")
    proc, found = run(site, tmp_path, [first, second])
    assert proc.returncode == 0 and found is None, proc
    text = (site / "eng" / "mod.py").read_text()
    assert text == BASE.replace("line 3\n", "line 3\nINSERTED\n").replace("line 19\n", "LINE 19\n")
    assert (site / "eng" / "new.py").read_text() == "a\nb"
    assert not (site / "eng" / "__pycache__" / "mod.cpython-311.pyc").exists()  # no stale bytecode of the old file
    assert "eng 1.2.3 at %s" % site in proc.stdout and "applied 0002-p.patch: eng/mod.py, eng/new.py" in proc.stdout


def test_a_patch_that_does_not_apply_names_patch_file_and_hunk_and_nothing_is_written(site, tmp_path):
    good = diff("eng/mod.py", "@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n")
    bad = diff("eng/mod.py", "@@ -9,3 +9,3 @@\n line 9\n-line ten\n+line 10!\n line 11\n")
    proc, found = run(site, tmp_path, [good, bad])
    assert proc.returncode == 3, proc
    assert found == {"code": "E_PATCH", "thing": "0002-p.patch", "message": (
        "patch 0002-p.patch (number 2 of the series) does not apply to eng/mod.py: hunk 1 of 1 (@@ -9,3 +9,3 @@) "
        "matches no lines of the installed file (under %s)" % site)}
    assert (site / "eng" / "mod.py").read_text() == BASE  # the first patch was not written either


def test_a_file_the_package_lacks_and_a_version_the_series_is_not_for_are_named(site, tmp_path):
    proc, found = run(site, tmp_path, [diff("eng/gone.py", "@@ -1 +1 @@\n-a\n+b\n")])
    assert found["code"] == "E_PATCH" and "does not apply to eng/gone.py: the installed package has no such file" \
        in found["message"], proc
    proc, found = run(site, tmp_path, [diff("eng/mod.py", "@@ -1 +1 @@\n-line 1\n+x\n")], version="1.3.0")
    assert found == {"code": "E_PATCH_VERSION", "thing": "eng",
                     "message": "the series is for eng 1.3.0; the image holds eng 1.2.3 (%s)" % site}, proc
    assert (site / "eng" / "mod.py").read_text() == BASE


def test_a_path_outside_the_package_folder_is_refused(site, tmp_path):
    proc, found = run(site, tmp_path, [diff("../etc/passwd", "@@ -1 +1 @@\n-a\n+b\n")])
    assert found["code"] == "E_PATCH" and "leaves the package's folder" in found["message"], proc


def test_an_editable_install_is_patched_where_it_is_imported_from(site, tmp_path):
    # The dist-info in site-packages, the package's files in a source tree on the path (pip install -e puts it
    # there with a .pth file in site-packages).
    tree = tmp_path / "src"
    shutil.move(str(site / "eng"), str(tree / "eng"))
    proc, found = run(site, tmp_path, [diff("eng/mod.py", "@@ -1,2 +1,2 @@\n line 1\n-line 2\n+LINE 2\n")], also=tree)
    assert proc.returncode == 0 and found is None, proc
    assert "eng 1.2.3 at %s" % tree in proc.stdout and "LINE 2\n" in (tree / "eng" / "mod.py").read_text()


@pytest.mark.parametrize("engine, version", [("vllm", "0.26.0"), ("sglang", "0.5.5")])
def test_the_collections_series_declare_their_version_and_every_patch_parses(engine, version):
    from ansible_collections.gpuserve.llm.plugins.filter.engines import patch_series
    series = patch_series(os.path.join(os.path.dirname(VLLM), engine))
    assert series["version"] == version and series["patches"]
    assert version == engines.PROFILES[engine]["version"]  # the series is for the engine the profile pins
    for patch in series["patches"]:
        with open(patch["path"]) as f:
            files = apply_series.parse(f.read())
        assert files and all(f["old"] == f["new"] and f["old"].startswith(engine + "/") and f["hunks"] for f in files)


def test_a_hunk_applies_as_git_apply_would():
    lines = BASE.splitlines(True)
    hunk = {"header": "@@ -5,2 +5,3 @@", "old_start": 5, "old": ["line 5\n", "line 6\n"],
            "new": ["line 5\n", "new\n", "line 6\n"]}
    assert apply_series.apply_file(lines, [hunk])[4:7] == ["line 5\n", "new\n", "line 6\n"]
    far = dict(hunk, old_start=15)  # found ten lines off, the nearest match
    assert apply_series.apply_file(lines, [far])[5] == "new\n"
    with pytest.raises(LookupError):
        apply_series.apply_file(lines, [dict(hunk, old=["line 5\n", "line 7\n"])])
