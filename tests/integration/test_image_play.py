"""`site.yml --tags image`: the engine image pulled by digest from a real local registry, verified,
not pulled again on a rerun, E_IMAGE when the digest is wrong, nothing pulled in check mode; a pulled
vLLM 0.26.0 with the collection's patch series in a derived image."""
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile

import pytest

from conftest import docker


def import_tiny_image(docker_host, ref, text):
    """A one-file image made with `docker import`: a stand-in engine, quick to push, save and load."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = text.encode()
        info = tarfile.TarInfo("engine.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    subprocess.run(["docker", "-H", docker_host, "import", "-", ref], input=buf.getvalue(), stdout=subprocess.PIPE,
                   check=True)


@pytest.fixture
def pushed_image(registry, docker_host):
    """A tiny image pushed to the local registry and removed from the daemon: (repo, digest)."""
    repo = "%s/gpuserve-test/engine-%d" % (registry, int(time.time() * 1000))
    import_tiny_image(docker_host, repo + ":v1", "a stand-in engine image for the image stage tests\n")
    pushed = docker(docker_host, "push", repo + ":v1").stdout
    digest = [w for w in pushed.split() if w.startswith("sha256:")][-1]
    docker(docker_host, "rmi", repo + ":v1")
    yield repo, digest
    docker(docker_host, "rmi", "-f", "%s@%s" % (repo, digest), check=False)


def test_pull_by_digest_verified_then_nothing_on_rerun(fleet, pushed_image, docker_host):
    repo, digest = pushed_image
    ref = "%s@%s" % (repo, digest)
    # A stand-in with no engine in it: run as pulled (the derived image with the series: tests below).
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", llm_image=ref, image_pull_patches=False)
    fleet.host("gpu2", "rtxpro6000x4-healthy.json", llm_image=ref, image_pull_patches=False)
    first = fleet.run("site.yml", "--tags", "image")
    assert first.rc == 0, first
    assert first.says("%s is sha256:" % ref) and first.says("(pulled now)"), first
    assert digest in docker(docker_host, "image", "inspect", "--format", "{{.RepoDigests}}", ref).stdout
    second = fleet.run("site.yml", "--tags", "image")
    assert second.rc == 0 and second.says("(already here)") and not second.says("(pulled now)"), second
    assert all(r["changed"] == 0 for r in second.recap.values()), second


def test_check_mode_says_what_would_be_pulled_and_pulls_nothing(fleet, pushed_image, docker_host):
    repo, digest = pushed_image
    ref = "%s@%s" % (repo, digest)
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", llm_image=ref, image_pull_patches=False)
    result = fleet.run("site.yml", "--tags", "image", "--check")
    assert result.rc == 0, result
    assert result.says("would pull %s (check mode: nothing changed)" % ref), result
    assert docker(docker_host, "image", "inspect", ref, check=False).returncode != 0


def test_a_digest_the_registry_does_not_have_is_e_image(fleet, pushed_image, docker_host):
    repo = pushed_image[0]
    wrong = "%s@sha256:%s" % (repo, "0" * 64)
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", llm_image=wrong, image_pull_patches=False)
    result = fleet.run("site.yml", "--tags", "image")
    assert result.rc == 2, result
    assert result.says("E_IMAGE [error] gpu1 %s: pulling %s" % (wrong, wrong)), result
    assert result.says("Fix: Check the image reference and digest")
    assert result.recap["gpu1"]["failed"] == 1


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VLLM_PATCHES = os.path.join(ROOT, "patches", "vllm")
VLLM_VERSION = "0.26.0"
# Where the test-host image's python3 (Debian 12: 3.11) finds a package pip would install.
SITE = "usr/local/lib/python3.11/dist-packages"


def engine_wheel(package, version):
    """An engine's wheel (vLLM 0.26.0's: 304 MB; SGLang 0.5.5's: 3.4 MB), downloaded once with pip (no dependencies)
    and kept under .work/ by version."""
    cache = os.path.join(ROOT, ".work", "engine-wheels", "%s-%s" % (package, version))
    found = glob.glob(os.path.join(cache, "%s-%s-*.whl" % (package, version)))
    if not found:
        os.makedirs(cache, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--only-binary=:all:", "%s==%s" % (package, version), "-d", cache], check=True)
        found = glob.glob(os.path.join(cache, "%s-%s-*.whl" % (package, version)))
    return found[0]


@pytest.fixture(scope="module")
def vllm_pulled(registry, docker_host, tmp_path_factory):
    """A registry image holding vLLM 0.26.0's own installed package - the files the series patches and the
    dist-info (METADATA: the version importlib.metadata reads), byte for byte from the wheel, in the site-packages
    of the test-host image's python3 - pushed and removed from the daemon: (repo, digest)."""
    patched = set()
    for name in os.listdir(VLLM_PATCHES):
        if name.endswith(".patch"):
            with open(os.path.join(VLLM_PATCHES, name)) as f:
                patched.update(re.findall(r"^diff --git a/(\S+) b/", f.read(), re.M))
    context = tmp_path_factory.mktemp("vllm-image")
    with zipfile.ZipFile(engine_wheel("vllm", VLLM_VERSION)) as wheel, tarfile.open(str(context / "site.tar"), "w") as tar:
        for member in wheel.namelist():
            if member in patched or member.startswith("vllm-%s.dist-info/" % VLLM_VERSION):
                data = wheel.read(member)
                info = tarfile.TarInfo(member)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    base = os.environ.get("GPUSERVE_TESTHOST_IMAGE") or subprocess.run(
        [os.path.join(ROOT, "tests", "testbed", "images.sh")], env=dict(os.environ, DOCKER_HOST=docker_host),
        stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    (context / "Dockerfile").write_text("FROM %s\nADD site.tar /%s/\n" % (base, SITE))
    repo = "%s/gpuserve-test/vllm-%s" % (registry, VLLM_VERSION)
    tag = "%s:t%d" % (repo, int(time.time() * 1000))
    docker(docker_host, "build", "-q", "-t", tag, str(context))
    pushed = docker(docker_host, "push", tag).stdout
    digest = [w for w in pushed.split() if w.startswith("sha256:")][-1]
    docker(docker_host, "rmi", tag)
    yield repo, digest
    docker(docker_host, "rmi", "-f", "%s@%s" % (repo, digest), check=False)


# vLLM's MediaConnector._load_data_url as the image holds it, run in a container of the image: its source taken
# from the installed connector.py (importlib.metadata finds it) and run alone, over a stand-in of the image reader.
# vLLM's server answers a ValueError with 400 and its text, a NotImplementedError with 501.
DATA_URL_CHECK = r"""
import ast, json, sys
from importlib import metadata
path = metadata.distribution("vllm").locate_file("vllm/multimodal/media/connector.py")
tree = ast.parse(open(str(path)).read())
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MediaConnector")
fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_load_data_url")
fn.returns = None
for a in fn.args.args:
    a.annotation = None
class ImageMediaIO:
    def load_base64(self, media_type, data):
        return ["loaded", media_type, data]
ns = {"_DATA_URL_KINDS": {ImageMediaIO: "image"}}
exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), str(path), "exec"), ns)
out = {"version": metadata.version("vllm")}
for url in sys.argv[1:]:
    try:
        out[url] = ns["_load_data_url"](None, url, ImageMediaIO())
    except Exception as e:
        out[url] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""
NO_BASE64, OTHER_PARAM, GOOD = "data:image/png,AAAA", "data:image/png;charset=utf-8,AAAA", "data:image/png;base64,AAAA"


GEMV_CHECK = r"""
import json, py_compile
from importlib import metadata
path = str(metadata.distribution("vllm").locate_file("vllm/model_executor/kernels/linear/scaled_mm/flashinfer.py"))
py_compile.compile(path, cfile="/tmp/flashinfer.pyc", doraise=True)
print(json.dumps("if input.shape[0] == 1:\n        out = _gpuserve_gemv(" in open(path).read()))
"""


def gemv_patched(docker_host, image):
    """Whether the image's flashinfer.py has the one-token GEMV's dispatch; a file that does not compile fails the run."""
    out = docker(docker_host, "run", "--rm", "--network", "none", image, "python3", "-c", GEMV_CHECK).stdout
    return json.loads(out.strip().splitlines()[-1])


def data_urls(docker_host, image):
    out = docker(docker_host, "run", "--rm", "--network", "none", image, "python3", "-c", DATA_URL_CHECK,
                 NO_BASE64, OTHER_PARAM, GOOD).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_pulled_vllm_gets_the_series_in_a_derived_image(fleet, vllm_pulled, docker_host, tmp_path):
    repo, digest = vllm_pulled
    ref = "%s@%s" % (repo, digest)
    series = tmp_path / "series"
    shutil.copytree(VLLM_PATCHES, str(series))  # the real series, copied: the test changes it below
    built = "gpuserve-test/vllm-%d" % int(time.time() * 1000)
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", llm_image=ref, image_patch_dir=str(series), image_build_repo=built)
    first = fleet.run("site.yml", "--tags", "image")
    assert first.rc == 0, first
    tags = docker(docker_host, "images", "--format", "{{.Repository}}:{{.Tag}}", built).stdout.split()
    assert len(tags) == 1 and tags[0].startswith("%s:pulled-%s-" % (built, digest[7:19])), (tags, first)
    derived = tags[0]
    labels = json.loads(docker(docker_host, "image", "inspect", "--format", "{{json .Config.Labels}}", derived).stdout)
    assert labels["gpuserve.llm.base"] == ref and labels["gpuserve.llm.base-digest"] == digest
    assert derived.endswith("-" + labels["gpuserve.llm.patches"][:12])
    assert labels["gpuserve.llm.series"].split() == sorted(n for n in os.listdir(VLLM_PATCHES) if n.endswith(".patch"))
    assert labels["gpuserve.llm.engine-version"] == VLLM_VERSION
    assert first.says("%s is sha256:" % derived) and first.says("(built now from %s, pulled now, with 0001-" % ref), first
    # The bad request, through the derived image's own code: a data URL without ;base64 is a 400 that says what
    # is wrong, one with ;charset= where ;base64 belongs a 400 (was a 501); the pulled image as it was, unpatched.
    form = ["ValueError", "A media data URL must have the form data:<media type>;base64,<base64 data>."]
    assert data_urls(docker_host, derived) == {"version": VLLM_VERSION, NO_BASE64: form, OTHER_PARAM: form,
                                               GOOD: ["loaded", "image/png", "AAAA"]}
    assert data_urls(docker_host, ref) == {
        "version": VLLM_VERSION, NO_BASE64: ["ValueError", "not enough values to unpack (expected 2, got 1)"],
        OTHER_PARAM: ["NotImplementedError", "Only base64 data URLs are supported for now."],
        GOOD: ["loaded", "image/png", "AAAA"]}
    # The one-token GEMV (0004, issue 37) in vLLM's own block-FP8 op, as Python that compiles; not in the pulled image.
    assert gemv_patched(docker_host, derived) is True and gemv_patched(docker_host, ref) is False
    second = fleet.run("site.yml", "--tags", "image")
    assert second.rc == 0 and second.says("%s is sha256:" % derived) and second.says("(already here)"), second
    assert second.recap["gpu1"]["changed"] == 0, second
    # A changed series is a new image: check mode says so and builds nothing; the run builds it.
    (series / "series").write_text((series / "series").read_text().replace(
        "0003-malformed-data-urls-and-frameless-videos-are-client-errors.patch", ""))
    check = fleet.run("site.yml", "--tags", "image", "--check")
    assert check.rc == 0 and check.says("would build %s:pulled-%s-" % (built, digest[7:19])), check
    assert check.says("with the patch series (check mode: nothing changed)"), check
    assert docker(docker_host, "images", "-q", built).stdout.split() == \
        [docker(docker_host, "image", "inspect", "--format", "{{.Id}}", derived).stdout.strip()[7:19]]
    third = fleet.run("site.yml", "--tags", "image")
    assert third.rc == 0 and third.says("(built now from %s, with 0001-" % ref), third
    now = [t for t in docker(docker_host, "images", "--format", "{{.Repository}}:{{.Tag}}", built)
           .stdout.split() if t != derived]
    assert len(now) == 1 and data_urls(docker_host, now[0])[NO_BASE64][1].startswith("not enough values"), third
    docker(docker_host, "rmi", derived, now[0], check=False)


def test_a_series_that_does_not_fit_the_pulled_vllm_stops_before_any_container(fleet, vllm_pulled, docker_host,
                                                                               tmp_path):
    repo, digest = vllm_pulled
    ref = "%s@%s" % (repo, digest)
    stale, other = tmp_path / "stale", tmp_path / "other-version"
    shutil.copytree(VLLM_PATCHES, str(stale))
    shutil.copytree(VLLM_PATCHES, str(other))
    # A patch after the series' own whose context the installed connector.py does not have.
    (stale / "0005-stale.patch").write_text(
        "diff --git a/vllm/multimodal/media/connector.py b/vllm/multimodal/media/connector.py\n"
        "--- a/vllm/multimodal/media/connector.py\n+++ b/vllm/multimodal/media/connector.py\n"
        "@@ -300,3 +300,3 @@\n         url: str,\n-        media_io: NotThere,\n+        media_io: MediaIO,\n     ) -> _M:\n")
    (stale / "series").write_text((stale / "series").read_text() + "0005-stale.patch\n")
    (other / "series").write_text((other / "series").read_text().replace("# version: 0.26.0", "# version: 0.25.1"))
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", llm_image=ref, image_patch_dir=str(stale),
               image_build_repo="gpuserve-test/vllm-stale")
    fleet.host("gpu2", "rtxpro6000x4-healthy.json", llm_image=ref, image_patch_dir=str(other),
               image_build_repo="gpuserve-test/vllm-other")
    result = fleet.run("site.yml", "--tags", "image")
    assert result.rc == 2 and result.recap["gpu1"]["failed"] == 1 and result.recap["gpu2"]["failed"] == 1, result
    assert result.says("E_PATCH [error] gpu1 0005-stale.patch: patch 0005-stale.patch (number 5 of the series) does "
                       "not apply to vllm/multimodal/media/connector.py: hunk 1 of 1 (@@ -300,3 +300,3 @@) matches no "
                       "lines of the installed file"), result
    assert result.says("Fix: Rebase the named patch"), result
    assert result.says("E_PATCH_VERSION [error] gpu2 vllm: the series is for vllm 0.25.1; the image holds vllm "
                       "0.26.0"), result
    for repo_name in ("gpuserve-test/vllm-stale", "gpuserve-test/vllm-other"):
        assert not docker(docker_host, "images", "-q", repo_name).stdout.strip(), result
    # Nothing was left running or stopped from the pulled image (the failed build's container is removed).
    base_id = docker(docker_host, "image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
    assert not docker(docker_host, "ps", "-a", "-q", "--filter", "ancestor=" + base_id).stdout.strip(), result


SGLANG_PATCHES = os.path.join(ROOT, "patches", "sglang")
SGLANG_VERSION = "0.5.5"
# SGLang 0.5.5's _load_single_item and load_image as its package holds them, run alone (their source taken with ast)
# with Pillow and pybase64, on each image of the bad-media catalogue: what each raises. SGLang's chat handler answers
# a ValueError with 400 and its text, any other exception with 500 (serving_chat.py, serving_base.py).
SGLANG_LOAD_CHECK = r"""
import ast, enum, io, json, sys, typing
from PIL import Image
import pybase64

def source(path, name):
    node = next(n for n in ast.walk(ast.parse(open(path).read())) if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list, node.returns = [], None
    for arg in node.args.args:
        arg.annotation = None
    return ast.unparse(node)

class Modality(enum.Enum):
    IMAGE = 1
    VIDEO = 2
    AUDIO = 3

site, cases = sys.argv[1], json.load(sys.stdin)
ns = {"Image": Image, "BytesIO": io.BytesIO, "pybase64": pybase64, "Modality": Modality, "ImageData": type("ImageData", (), {})}
exec(source(site + "/sglang/srt/utils/common.py", "load_image"), ns)
exec(source(site + "/sglang/srt/multimodal/processors/base_processor.py", "_load_single_item"), ns)
out = {}
for name, url in cases.items():
    try:
        ns["_load_single_item"](url, Modality.IMAGE, None, None, True)
        out[name] = ["loaded", ""]
    except Exception as e:
        out[name] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""


def sglang_site(tmp_path):
    """SGLang 0.5.5's files the series patches and its dist-info, from its wheel, with the one its image loader
    lives in."""
    site = tmp_path / "site"
    with zipfile.ZipFile(engine_wheel("sglang", SGLANG_VERSION)) as wheel:
        for member in wheel.namelist():
            if member in ("sglang/srt/multimodal/processors/base_processor.py", "sglang/srt/utils/common.py") or \
                    member.startswith("sglang-%s.dist-info/" % SGLANG_VERSION):
                wheel.extract(member, str(site))
    return site


def test_the_sglang_series_applies_to_its_package_and_makes_undecodable_images_a_client_error(tmp_path):
    """Issue 39 item 2 for SGLang 0.5.5, whose image the example does not run here (a GPU engine): the series the
    image stage applies to a pulled SGLang's package (apply_series.py, as derive.yml runs it) applies to 0.5.5's own
    files, and turns every image the catalogue has that SGLang cannot decode from a 500 (RuntimeError, the whole
    data URL echoed) into a 400 (ValueError) that says why without the data."""
    sys.path.insert(0, os.path.join(ROOT, ".collections"))
    from ansible_collections.gpuserve.llm.plugins.module_utils import bad_media
    site = sglang_site(tmp_path)
    cases = dict((c["name"], c["parts"][0]["image_url"]["url"]) for c in bad_media.cases()
                 if c["parts"][0]["type"] == "image_url" and c["name"] not in ("too-many-images", "oversize-data-url"))

    def loads():
        got = subprocess.run([sys.executable, "-c", SGLANG_LOAD_CHECK, str(site)], input=json.dumps(cases), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        assert got.returncode == 0, got.stderr[-2000:]
        return json.loads(got.stdout)

    before = loads()
    series = sorted(n for n in os.listdir(SGLANG_PATCHES) if n.endswith(".patch"))
    argv = [sys.executable, os.path.join(ROOT, "roles", "image", "files", "apply_series.py"), "--package", "sglang",
            "--version", SGLANG_VERSION, "--dir", SGLANG_PATCHES] + [os.path.join(SGLANG_PATCHES, n) for n in series]
    env = dict(os.environ, PYTHONPATH=str(site))
    applied = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    assert applied.returncode == 0 and "sglang 0.5.5 at" in applied.stdout, (applied.stdout, applied.stderr)
    after = loads()
    failed = sorted(n for n, got in before.items() if got[0] != "loaded")
    # as shipped: a 500 for each, with the request's data in the message
    assert failed and all(before[n][0] == "RuntimeError" and "Error while loading data data:" in before[n][1]
                          for n in failed), before
    # patched: a 400 for each, and the truncated PNG (which Image.open let through) too; the data never echoed
    assert sorted(n for n, got in after.items() if got[0] == "ValueError") == sorted(failed + ["truncated-png"]), after
    assert all(after[n][1].startswith("the image could not be decoded: ") and "base64," not in after[n][1]
               and len(after[n][1]) < 300 for n in failed), after
    assert "DecompressionBombError" in after["bomb-png"][1] and "truncated" in after["truncated-png"][1], after
    # what SGLang serves whatever the header says (no ;base64, another charset, text/plain) is the front's to refuse
    assert sorted(n for n, got in after.items() if got[0] == "loaded") == [
        "data-url-no-base64", "data-url-other-encoding", "data-url-text-mime"], after
    # a second time on the patched package: refused, nothing written
    again = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    assert again.returncode == 3 and "patch 0001-undecodable-media-is-a-client-error.patch (number 1 of the series) " \
        "does not apply to sglang/srt/multimodal/processors/base_processor.py" in again.stderr, again.stderr


def test_llamacpp_image_from_debian_packages_built_once_and_named_by_version(fleet, docker_host, tmp_path):
    cpu = dict(llm_engine="llamacpp", llm_gpus=[], llm_kv="bf16", llm_vision=False, llm_dense="q4",
               llm_model_dense="q4", llm_reserve_gib=0, llm_kv_cap_gib=0, llm_drafter="off",
               image_debian_cache=os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", str(tmp_path / "images")))
    fleet.host("cpu1", None, **cpu)
    fleet.host("cpu2", None, **cpu)
    first = fleet.run("site.yml", "--tags", "image")
    assert first.rc == 0, first
    tags = docker(docker_host, "images", "--format", "{{.Repository}}:{{.Tag}}", "gpuserve/llama.cpp").stdout.split()
    assert tags, first
    # The tag is the package version (1:0.7.0+dfsg-2 -> 1-0.7.0-dfsg-2), and the image runs llama-server.
    tag = tags[0]
    assert re.match(r"^gpuserve/llama\.cpp:[0-9][0-9A-Za-z_.-]*$", tag), tag
    label = docker(docker_host, "image", "inspect", "--format", '{{index .Config.Labels "gpuserve.llm.llama-cpp-tools"}}',
                   tag).stdout.strip()
    assert re.sub(r"[^A-Za-z0-9_.-]", "-", label) == tag.split(":", 1)[1]
    version = docker(docker_host, "run", "--rm", "--network", "none", tag, "llama-server", "--version", check=False)
    assert "version" in version.stdout.lower(), version.stdout
    second = fleet.run("site.yml", "--tags", "image")
    assert second.rc == 0 and second.says("%s is sha256:" % tag) and second.says("(already here)"), second
    assert not second.says("not pinned")
    assert all(r["changed"] == 0 for r in second.recap.values()), second


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t"] + list(args), cwd=str(cwd),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True).stdout.strip()


@pytest.fixture
def engine_repo(tmp_path):
    """A real git repository (a stand-in engine: a Dockerfile), a pinned commit, and a patch series
    made with git format-patch, the second patch depending on the first."""
    repo = tmp_path / "engine-src"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "engine.txt").write_text("engine v1\n")
    (repo / "Dockerfile").write_text('FROM scratch\nCOPY engine.txt /engine.txt\nLABEL engine.feature="base"\n')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "Dockerfile").write_text('FROM scratch\nCOPY engine.txt /engine.txt\nLABEL engine.feature="a"\n')
    _git(repo, "commit", "-qam", "feature a")
    (repo / "Dockerfile").write_text('FROM scratch\nCOPY engine.txt /engine.txt\nLABEL engine.feature="a+b"\n')
    _git(repo, "commit", "-qam", "feature b")
    patches = tmp_path / "patches"
    _git(repo, "format-patch", "-q", "-o", str(patches), base)
    _git(repo, "reset", "-q", "--hard", base)
    return repo, base, patches


def test_build_at_commit_with_patch_series_labelled_and_not_rebuilt(fleet, engine_repo, docker_host):
    repo, base, patches = engine_repo
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", image_source="build", image_git_repo=str(repo),
               image_git_commit=base, image_patch_dir=str(patches), image_build_repo="gpuserve-test/engine",
               image_build_dockerfile="Dockerfile", image_build_target="")
    first = fleet.run("site.yml", "--tags", "image")
    assert first.rc == 0, first
    tag = [t for t in docker(docker_host, "images", "--format", "{{.Repository}}:{{.Tag}}", "gpuserve-test/engine")
           .stdout.split() if t.startswith("gpuserve-test/engine:%s-" % base[:12])]
    assert len(tag) == 1, first
    labels = docker(docker_host, "image", "inspect", "--format", "{{json .Config.Labels}}", tag[0]).stdout
    assert '"engine.feature":"a+b"' in labels  # both patches, in order
    assert '"gpuserve.llm.commit":"%s"' % base in labels
    assert '"gpuserve.llm.series":"0001-feature-a.patch 0002-feature-b.patch"' in labels
    assert first.says("(built now, log:")
    assert "Step 2/" in (fleet.dir / "gpu1" / "data" / "image-build" / "vllm" / "build.log").read_text()
    second = fleet.run("site.yml", "--tags", "image")
    assert second.rc == 0 and second.says("(already here)"), second
    assert second.recap["gpu1"]["changed"] == 0, second
    docker(docker_host, "rmi", tag[0], check=False)


def test_a_patch_that_does_not_apply_is_e_patch_naming_it(fleet, engine_repo):
    repo, base, patches = engine_repo
    (patches / "0003-stale.patch").write_text(
        "--- a/Dockerfile\n+++ b/Dockerfile\n@@ -1,3 +1,3 @@\n FROM scratch\n-COPY nothing.txt /\n+COPY other.txt /\n"
        " LABEL engine.feature=\"a+b\"\n")
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", image_source="build", image_git_repo=str(repo),
               image_git_commit=base, image_patch_dir=str(patches), image_build_repo="gpuserve-test/engine",
               image_build_dockerfile="Dockerfile", image_build_target="")
    result = fleet.run("site.yml", "--tags", "image")
    assert result.rc == 2, result
    assert result.says("E_PATCH [error] gpu1 0003-stale.patch: patch 0003-stale.patch (number 3 of the series) "
                       "does not apply"), result


def test_a_failed_build_is_e_build_with_the_log_end(fleet, engine_repo):
    repo, base, patches = engine_repo
    (patches / "series").write_text("0001-feature-a.patch\n")  # the series file rules: 0002 is left out
    _git(repo, "rm", "-q", "engine.txt")  # the Dockerfile still copies it
    _git(repo, "commit", "-qm", "broken")
    broken = _git(repo, "rev-parse", "HEAD")
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", image_source="build", image_git_repo=str(repo),
               image_git_commit=broken, image_patch_dir=str(patches), image_build_repo="gpuserve-test/engine",
               image_build_dockerfile="Dockerfile", image_build_target="")
    result = fleet.run("site.yml", "--tags", "image")
    assert result.rc == 2, result
    assert result.says("E_BUILD [error] gpu1 gpuserve-test/engine:%s-" % broken[:12]), result
    assert result.says("engine.txt"), result  # the daemon's words about the missing file
    log = fleet.dir / "gpu1" / "data" / "image-build" / "vllm" / "build.log"
    assert "COPY engine.txt" in log.read_text()  # the full log is kept on the host


def _sleeper_image(docker_host):
    """A base image holding only /bin/sleep and the C library it needs (test plumbing: docker import)."""
    tag = "gpuserve-test/sleeper:1"
    if docker(docker_host, "images", "-q", tag).stdout.strip():
        return tag
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in ("/bin/sleep", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"):
            tar.add(os.path.realpath(path), arcname=path.lstrip("/"))
    subprocess.run(["docker", "-H", docker_host, "import", "-", tag], input=buf.getvalue(), check=True,
                   stdout=subprocess.PIPE)
    return tag


def test_a_long_build_prints_progress_lines_while_it_runs(fleet, tmp_path, docker_host):
    repo = tmp_path / "slow-engine"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "Dockerfile").write_text('FROM %s\nRUN ["/bin/sleep", "5"]\nLABEL engine.feature="slow"\n'
                                     % _sleeper_image(docker_host))
    _git(repo, "add", "Dockerfile")
    _git(repo, "commit", "-qm", "slow")
    commit = _git(repo, "rev-parse", "HEAD")
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", image_source="build", image_git_repo=str(repo),
               image_git_commit=commit, image_patch_dir=str(tmp_path / "no-patches"),
               image_build_repo="gpuserve-test/slow-engine", image_build_dockerfile="Dockerfile",
               image_build_target="", image_progress_interval=1)
    result = fleet.run("site.yml", "--tags", "image")
    assert result.rc == 0, result
    ticks = re.findall(r"item=building gpuserve-test/slow-engine:\S+: (\d+) s elapsed", result.output)
    assert len(ticks) >= 3 and int(ticks[-1]) >= 4, result  # a line a second, for a five-second build
    assert result.says("(built now, log:")
    docker(docker_host, "rmi", "gpuserve-test/slow-engine:%s-%s" % (commit[:12], "e3b0c44298fc"), check=False)


@pytest.fixture
def second_daemon(tmp_path):
    """Another test-bed daemon with its own data root: a second host that shares nothing with the first."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testbed", "dockerd.sh")
    env = dict(os.environ, GPUSERVE_TESTBED_STATE=str(tmp_path / "docker2"))
    line = subprocess.run([script, "start"], env=env, stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    yield line.split("=", 1)[1]
    subprocess.run([script, "stop"], env=env, check=False)


def test_hosts_without_a_registry_load_the_copy_saved_through_the_workstation(fleet, docker_host, second_daemon,
                                                                              tmp_path):
    """A fleet of two images (issue 38 item 1: hosts that differ): each image saved once, on the first host that
    holds it, and loaded where it is missing."""
    stamp = int(time.time())
    ref, other = "gpuserve-test/offline-engine:v%d" % stamp, "gpuserve-test/offline-engine-b:v%d" % stamp
    import_tiny_image(docker_host, ref, "an engine no registry has\n")
    import_tiny_image(docker_host, other, "another engine no registry has\n")
    cache = tmp_path / "saved"
    offline = dict(image_distribute="workstation", image_distribute_cache=str(cache), image_pull_patches=False)
    fleet.host("first", "rtxpro6000x4-healthy.json", llm_image=ref, **offline)
    fleet.host("second", "rtxpro6000x4-healthy.json", llm_image=ref, llm_docker_host=second_daemon, **offline)
    # The play's hosts come in the inventory's (sorted) order: first, fourth, second, third. So the first host running
    # the second image, fourth, lacks it and third, later, holds it: no host may pull (no registry has it).
    fleet.host("third", "rtxpro6000x4-healthy.json", llm_image=other, **offline)
    fleet.host("fourth", "rtxpro6000x4-healthy.json", llm_image=other, llm_docker_host=second_daemon, **offline)
    result = fleet.run("site.yml", "--tags", "image")
    assert result.rc == 0, result
    assert result.says("(loaded from the copy saved on first)"), result
    assert result.says("(loaded from the copy saved on third)"), result
    for image in (ref, other):
        ids = [docker(h, "image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
               for h in (docker_host, second_daemon)]
        assert ids[0] == ids[1] and ids[0].startswith("sha256:"), (image, ids)
    assert len(list(cache.iterdir())) == 2, "each saved image is kept on the workstation"
    again = fleet.run("site.yml", "--tags", "image")
    assert again.rc == 0 and all(r["changed"] == 0 for r in again.recap.values()), again
    docker(docker_host, "rmi", ref, other, check=False)
