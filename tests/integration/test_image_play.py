"""`site.yml --tags image`: the engine image pulled by digest from a real local registry, verified,
not pulled again on a rerun, E_IMAGE when the digest is wrong, nothing pulled in check mode."""
import io
import os
import re
import tarfile
import time

import pytest

from conftest import docker


@pytest.fixture
def pushed_image(registry, docker_host):
    """A tiny image pushed to the local registry and removed from the daemon: (repo, digest)."""
    repo = "%s/gpuserve-test/engine-%d" % (registry, int(time.time() * 1000))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"a stand-in engine image for the image stage tests\n"
        info = tarfile.TarInfo("engine.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    subprocess_input = buf.getvalue()
    import subprocess
    subprocess.run(["docker", "-H", docker_host, "import", "-", repo + ":v1"], input=subprocess_input,
                   stdout=subprocess.PIPE, check=True)
    pushed = docker(docker_host, "push", repo + ":v1").stdout
    digest = [w for w in pushed.split() if w.startswith("sha256:")][-1]
    docker(docker_host, "rmi", repo + ":v1")
    yield repo, digest
    docker(docker_host, "rmi", "-f", "%s@%s" % (repo, digest), check=False)


def test_pull_by_digest_verified_then_nothing_on_rerun(fleet, pushed_image, docker_host):
    repo, digest = pushed_image
    ref = "%s@%s" % (repo, digest)
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", llm_image=ref)
    fleet.host("gpu2", "rtxpro6000x4-healthy.json", llm_image=ref)
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
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", llm_image=ref)
    result = fleet.run("site.yml", "--tags", "image", "--check")
    assert result.rc == 0, result
    assert result.says("would pull %s (check mode: nothing changed)" % ref), result
    assert docker(docker_host, "image", "inspect", ref, check=False).returncode != 0


def test_a_digest_the_registry_does_not_have_is_e_image(fleet, pushed_image, docker_host):
    repo = pushed_image[0]
    wrong = "%s@sha256:%s" % (repo, "0" * 64)
    fleet.host("gpu1", "rtxpro6000x4-healthy.json", llm_image=wrong)
    result = fleet.run("site.yml", "--tags", "image")
    assert result.rc == 2, result
    assert result.says("E_IMAGE [error] gpu1 %s: pulling %s" % (wrong, wrong)), result
    assert result.says("Fix: Check the image reference and digest")
    assert result.recap["gpu1"]["failed"] == 1


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
