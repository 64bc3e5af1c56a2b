"""The weights stage's hub mode for real: huggingface_hub on each host against the stand-in hub
(tests/hub_double/, real files, real hashes, on localhost), a fleet of three hosts whose seed
downloads once and whose peers copy over rsync, then the checks a user relies on: the source served
one download's worth of bytes, every cache verifies, progress lines per host, a rerun changes nothing,
check mode says each host's bytes and writes nothing, and the failures carry their codes."""
import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_gguf
from conftest import TESTS, docker

REPO = "acme/tiny-chat-GGUF"
TOKEN = "hf_standin_SECRET_token"
README = "# tiny-chat\nA stand-in repo.\n"
HUB = dict(llm_engine="llamacpp", llm_gpus=[], llm_kv="bf16", llm_vision=False, llm_dense="q4", llm_model_dense="q4",
           llm_reserve_gib=0, llm_kv_cap_gib=0, llm_weights="hub", llm_model=REPO, llm_model_max_context=8192,
           llm_context=2048, llm_max_tokens=256, llm_parallel=4, llm_drafter="off", llm_host="127.0.0.1",
           llm_served_model_name="tiny", llm_hf_token=TOKEN, weights_progress_interval=1,
           weights_allow_patterns=["*Q8_0.gguf", "README.md"], weights_peer_address="127.0.0.1")


class StandIn:
    def __init__(self, root, token, bind="127.0.0.1"):
        self.root = root
        self.proc = subprocess.Popen([sys.executable, os.path.join(TESTS, "hub_double", "hub_server.py"),
                                      "--root", str(root), "--token", token, "--bind", bind],
                                     stdout=subprocess.PIPE, text=True)
        self.url = "http://%s:%d" % (bind, int(self.proc.stdout.readline().split()[1]))

    def control(self, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        with urllib.request.urlopen(urllib.request.Request(self.url + path, data=data), timeout=10) as r:
            return json.loads(r.read())

    def file_bytes(self):
        return sum(self.control("/_stats")["by_path"].values())


@pytest.fixture(scope="module")
def repo_dir(tmp_path_factory):
    """A GGUF repo as sites publish them: two quantisations (one real GGUF the engine can load) and a README."""
    root = tmp_path_factory.mktemp("hub")
    folder = root / "acme" / "tiny-chat-GGUF"
    folder.mkdir(parents=True)
    chat = open(os.path.join(TESTS, "..", "templates", "chat", "chatml-tools.jinja")).read()
    dummy_gguf.write(str(folder / "tiny-chat-Q8_0.gguf"), seed=0, layers=2, context=8192, chat_template=chat,
                     name="tiny-chat")
    (folder / "tiny-chat-F16.gguf").write_bytes(os.urandom(3 << 20))
    (folder / "README.md").write_text(README)
    draft = root / "acme" / "tiny-draft-GGUF"
    draft.mkdir()
    dummy_gguf.write(str(draft / "tiny-draft-Q8_0.gguf"), seed=1, layers=2, context=8192, chat_template=chat,
                     name="tiny-draft")
    text = root / "acme" / "tiny-text"  # a text checkpoint (no vision tower), as its config.json says
    text.mkdir()
    (text / "config.json").write_text(json.dumps({"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
                                                  "num_nextn_predict_layers": 1}))
    (text / "model.safetensors").write_bytes(os.urandom(1 << 20))
    return root


@pytest.fixture
def hub(repo_dir):
    stand_in = StandIn(repo_dir, TOKEN)
    yield stand_in
    stand_in.proc.terminate()
    stand_in.proc.wait()


def hub_fleet(fleet, hub, names, port, **extra):
    for name in names:
        fleet.host(name, None, weights_hf_endpoint=hub.url, weights_rsync_port=port, **dict(HUB, **extra))
    return fleet


def hub_dir_file(hub, name):
    return hub.root / "acme" / "tiny-chat-GGUF" / name


def wanted_bytes(hub):
    """What the test's allow patterns pick: the Q8_0 GGUF and the README."""
    return os.path.getsize(str(hub_dir_file(hub, "tiny-chat-Q8_0.gguf"))) + len(README)


def caches(fleet, names):
    return [fleet.dir / n / "data" / "hf" / "models--acme--tiny-chat-GGUF" for n in names]


def test_a_fleet_downloads_once_verifies_everywhere_and_a_rerun_changes_nothing(fleet, hub):
    names = ["h1", "h2", "h3"]
    hub_fleet(fleet, hub, names, 18731)
    manifest_bytes = wanted_bytes(hub)

    preview = fleet.run("site.yml", "--tags", "weights", "--check")
    assert preview.rc == 0, preview
    assert preview.says("would fetch 0.01 GiB (%d bytes) in 2 of 2 files from %s" % (manifest_bytes, hub.url)), preview
    assert preview.says("would fetch 0.01 GiB (%d bytes) in 2 of 2 files from h1 over rsync" % manifest_bytes), preview
    assert all(not c.exists() for c in caches(fleet, names)), "check mode wrote a cache"
    assert hub.file_bytes() == 0

    # Slow enough for two progress lines a second apart even on a loaded machine: ~10 s from the
    # hub, ~10 s over rsync (the first line comes after weights_progress_interval, 1 s here; under the
    # full test command one host's first line came 3.3 MiB into a 5.4 MiB copy at 1 MiB/s, and no second).
    hub.control("/_faults", {"rate": {"tiny-chat-Q8_0.gguf": 1 << 19}})
    first = fleet.run("site.yml", "--tags", "weights", "-e", "weights_rsync_bwlimit_kib=512")
    assert first.rc == 0, first
    assert TOKEN not in first.output
    # One download's worth at the source for three hosts; the peers came over rsync.
    assert hub.file_bytes() == manifest_bytes, hub.control("/_stats")["by_path"]
    for host, source in (("h1", hub.url), ("h2", "rsync://"), ("h3", "rsync://")):
        lines = re.findall(r"item=%s fetching acme/tiny-chat-GGUF from %s\S*: ([\d.]+) (\w+) of 5.4 MiB" % (host, source),
                           first.output)
        assert len(lines) >= 2, first  # bytes done and due, more than once while it runs

    for cache in caches(fleet, names):
        snapshots = list((cache / "snapshots").iterdir())
        assert len(snapshots) == 1
        gguf = snapshots[0] / "tiny-chat-Q8_0.gguf"
        assert gguf.is_symlink() and dummy_gguf.digest(str(gguf)) == dummy_gguf.digest(str(hub_dir_file(hub, "tiny-chat-Q8_0.gguf")))
        assert (cache / "refs" / "main").read_text() == snapshots[0].name
        assert not (snapshots[0] / "tiny-chat-F16.gguf").exists()
    assert first.says("acme/tiny-chat-GGUF: weights from the hub - acme/tiny-chat-GGUF@"), first

    again = fleet.run("site.yml", "--tags", "weights")
    assert again.rc == 0 and all(r["changed"] == 0 for r in again.recap.values()), again
    assert hub.file_bytes() == manifest_bytes
    assert again.says("all 2 files in the cache")


def test_a_corrupted_file_fails_verification_by_name_and_the_rerun_mends_it(fleet, hub):
    hub_fleet(fleet, hub, ["c1"], 18732)
    hub.control("/_faults", {"corrupt": ["tiny-chat-Q8_0.gguf"]})
    bad = fleet.run("site.yml", "--tags", "weights")
    assert bad.rc != 0
    assert bad.says("E_CHECKSUM") and bad.says("tiny-chat-Q8_0.gguf has sha256"), bad
    assert bad.says("the file was removed from the cache"), bad
    hub.control("/_faults", {"corrupt": []})
    mended = fleet.run("site.yml", "--tags", "weights")
    assert mended.rc == 0, mended
    # Only the bad file came again.
    by_path = hub.control("/_stats")["by_path"]
    assert by_path["acme/tiny-chat-GGUF/README.md"] == len(README)


def test_no_token_is_e_auth_and_nothing_is_written(fleet, hub):
    hub_fleet(fleet, hub, ["a1", "a2"], 18733, llm_hf_token="")
    result = fleet.run("site.yml", "--tags", "weights")
    assert result.rc != 0
    assert result.says("E_AUTH") and result.says("no token was given (llm_hf_token is empty)"), result
    assert result.says("E_DOWNLOAD: a1 reads the hub's file list for a2"), result
    assert all(not c.exists() for c in caches(fleet, ["a1", "a2"]))


def test_a_disk_too_small_is_e_disk_before_a_byte_is_written(fleet, hub):
    hub_fleet(fleet, hub, ["d1"], 18734, weights_reserve_gib=1000000)
    short = fleet.run("site.yml", "--tags", "weights")
    assert short.rc != 0 and short.says("E_DISK: d1 needs 0.01 GiB (%d bytes) more" % wanted_bytes(hub)), short
    assert hub.file_bytes() == 0 and not caches(fleet, ["d1"])[0].exists()


def test_a_mirror_folder_is_copied_and_verified_against_the_endpoints_list(fleet, hub):
    hub_fleet(fleet, hub, ["f1"], 18736, weights_source="folder", weights_source_dir=str(hub.root / "acme" / "tiny-chat-GGUF"))
    result = fleet.run("site.yml", "--tags", "weights")
    assert result.rc == 0, result
    assert result.says("fetches 0.01 GiB (%d bytes) in 2 of 2 files from %s" % (wanted_bytes(hub), hub.root)), result
    assert hub.file_bytes() == 0  # the endpoint gave the file list only
    snapshot = next((caches(fleet, ["f1"])[0] / "snapshots").iterdir())
    assert (snapshot / "tiny-chat-Q8_0.gguf").read_bytes() == hub_dir_file(hub, "tiny-chat-Q8_0.gguf").read_bytes()


def test_patterns_picking_two_gguf_models_are_e_config(fleet, hub):
    hub_fleet(fleet, hub, ["g1"], 18735, weights_allow_patterns=[])
    many = fleet.run("site.yml", "--tags", "weights")
    assert many.rc != 0 and many.says("the allow patterns pick 2 GGUF models"), many
    assert many.says("tiny-chat-F16.gguf, tiny-chat-Q8_0.gguf"), many


def test_the_fetched_gguf_and_draft_serve_with_the_whole_cache_mounted_read_only(fleet, hub, docker_host, tmp_path):
    prefix = "gpuserve-test-hub-%d" % os.getpid()
    images = os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", str(tmp_path / "images"))
    fleet.host("s1", None, weights_hf_endpoint=hub.url, llm_port=18140, llm_container_name=prefix,
               llm_api_key="sk-hub-test", image_debian_cache=images, **dict(HUB, llm_drafter="acme/tiny-draft-GGUF"))
    try:
        result = fleet.run("site.yml")
        assert result.rc == 0, result
        assert result.says("acme/tiny-chat-GGUF is now LIVE! on port 18140"), result
        assert not result.says("(dummy weights)") and TOKEN not in result.output
        request = urllib.request.Request(
            "http://127.0.0.1:18140/v1/chat/completions", headers={"Authorization": "Bearer sk-hub-test",
                                                                   "Content-Type": "application/json"},
            data=json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode())
        with urllib.request.urlopen(request, timeout=30) as r:
            assert json.loads(r.read())["choices"][0]["message"]["content"]
        name = docker(docker_host, "ps", "--filter", "label=gpuserve.llm.service=" + prefix,
                      "--format", "{{.Names}}").stdout.split()[0]
        inspect = json.loads(docker(docker_host, "inspect", name).stdout)[0]
        mounts = dict((m["Destination"], m) for m in inspect["Mounts"])
        assert mounts["/models/hf"]["RW"] is False
        model = inspect["Args"][inspect["Args"].index("--model") + 1]
        assert model.startswith("/models/hf/models--acme--tiny-chat-GGUF/snapshots/") and model.endswith("Q8_0.gguf")
        draft = inspect["Args"][inspect["Args"].index("--model-draft") + 1]
        assert draft.startswith("/models/hf/models--acme--tiny-draft-GGUF/snapshots/") and draft.endswith(".gguf")
        assert result.says("; draft acme/tiny-draft-GGUF@"), result
        assert "HF_HUB_OFFLINE=1" in inspect["Config"]["Env"]
    finally:
        for name in docker(docker_host, "ps", "-aq", "--filter", "label=gpuserve.llm.service=" + prefix).stdout.split():
            docker(docker_host, "rm", "-f", name, check=False)


def test_what_the_checkpoint_cannot_serve_is_refused_before_its_weights(fleet, hub):
    """Vision with a text checkpoint (its config.json says so) and MTP drafting with a GGUF that has no MTP
    layers (its header says so): E_UNSUPPORTED from what was read first, no weight fetched."""
    config = (hub.root / "acme" / "tiny-text" / "config.json").read_text()
    hub_fleet(fleet, hub, ["v1"], 18737, llm_engine="vllm", llm_gpus=[0], llm_model="acme/tiny-text",
              llm_vision=True, llm_media_urls="data_only", llm_kv="fp8", llm_dense="bf16", llm_model_dense="bf16",
              llm_drafter="mtp", weights_allow_patterns=[])
    vision = fleet.run("site.yml", "--tags", "weights")
    assert vision.rc != 0 and vision.says("E_UNSUPPORTED"), vision
    assert vision.says("llm_vision is true but acme/tiny-text@") and vision.says("is a text model"), vision
    assert hub.control("/_stats")["by_path"] == {"acme/tiny-text/config.json": len(config)}

    fleet.hosts.clear()
    hub.control("/_reset", {})
    hub_fleet(fleet, hub, ["m1"], 18738, llm_drafter="mtp")
    mtp = fleet.run("site.yml", "--tags", "weights")
    assert mtp.rc != 0 and mtp.says("llm_drafter is 'mtp' but acme/tiny-chat-GGUF@"), mtp
    assert mtp.says("(GGUF header) has no MTP layers"), mtp
    assert hub.file_bytes() <= 1 << 20  # the header's read, not the weights
    assert not caches(fleet, ["m1"])[0].exists()
