"""module_utils/hub_*.py against the stand-in hub (tests/hub_double/hub_server.py, real HTTP on
localhost, real files and hashes) through huggingface_hub itself: the file list and its failures,
the download and its resumption, verification that names a bad file, the folder and rsync sources."""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import hub_cache, hub_fetch, hub_manifest, hub_verify
from ansible_collections.gpuserve.llm.plugins.module_utils import progress

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TESTS, "hub_double"))
import hub_server  # noqa: E402  pylint: disable=wrong-import-position

REPO = "acme/tiny"
TOKEN = "hf_unit_SECRET"
BIG = "model-00001-of-00002.safetensors"  # above huggingface_hub's 10 MiB read size: a drop can resume mid-file
FILES = {"config.json": b'{"architectures": ["Tiny"]}', "tokenizer.json": b"{}" * 3000,
         BIG: os.urandom(24 << 20), "model-00002-of-00002.safetensors": os.urandom(1 << 20),
         "sub/extra.txt": b"nested\n", "notes.md": b"# not wanted\n"}
WANTED = ["*.json", "*.safetensors", "sub/*"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("hub")
    for name, data in FILES.items():
        path = base / "acme" / "tiny" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return base


@pytest.fixture
def stand_in(root):
    server, port = hub_server.serve(str(root), token=TOKEN)
    yield server, "http://127.0.0.1:%d" % port
    server.shutdown()


def control(url, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url + path, data=data), timeout=10) as r:
        return json.loads(r.read())


def manifest(url):
    return hub_fetch.manifest_from_hub(REPO, "main", url, TOKEN, WANTED, [])


def test_the_file_list_has_the_hubs_hashes_and_the_patterns_choice(stand_in):
    _server, url = stand_in
    m = manifest(url)
    wanted = ["config.json", "tokenizer.json", BIG, "model-00002-of-00002.safetensors", "sub/extra.txt"]
    assert [f["path"] for f in m["files"]] == sorted(wanted)
    by = dict((f["path"], f) for f in m["files"])
    assert by[BIG]["sha256"] == hashlib.sha256(FILES[BIG]).hexdigest() == by[BIG]["etag"]
    data = FILES["config.json"]
    assert by["config.json"]["sha256"] is None
    assert by["config.json"]["etag"] == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert m["bytes"] == sum(len(FILES[p]) for p in by) and len(m["commit"]) == 40


def test_refusals_are_e_auth_and_a_wrong_revision_e_config_without_the_token_in_the_message(stand_in):
    _server, url = stand_in
    with pytest.raises(hub_manifest.HubError) as none:
        hub_fetch.manifest_from_hub(REPO, "main", url, "", [], [])
    assert none.value.code == "E_AUTH" and "no token was given" in none.value.message
    with pytest.raises(hub_manifest.HubError) as wrong:
        hub_fetch.manifest_from_hub(REPO, "main", url, "hf_wrong_SECRET", [], [])
    assert wrong.value.code == "E_AUTH" and "was refused" in wrong.value.message
    assert "SECRET" not in wrong.value.message
    with pytest.raises(hub_manifest.HubError) as rev:
        hub_fetch.manifest_from_hub(REPO, "v9.9", url, TOKEN, [], [])
    assert rev.value.code == "E_CONFIG" and "'v9.9'" in rev.value.message
    with pytest.raises(hub_manifest.HubError) as nothing:
        hub_fetch.manifest_from_hub(REPO, "main", url, TOKEN, ["*.gguf"], [])
    assert nothing.value.code == "E_CONFIG" and "matches the allow patterns" in nothing.value.message


def test_an_unreachable_hub_is_e_download_and_a_verified_cache_answers_for_it(stand_in, tmp_path):
    _server, url = stand_in
    with pytest.raises(hub_manifest.HubError) as down:
        hub_fetch.manifest_from_hub(REPO, "main", "http://127.0.0.1:9", TOKEN, WANTED, [])
    assert down.value.code == "E_DOWNLOAD"
    cache = str(tmp_path / "cache")
    m = manifest(url)
    hub_fetch.fetch_hub(cache, m, TOKEN, url, 4)
    hub_cache.link_snapshot(cache, m)
    hub_verify.verify(cache, m)
    assert hub_cache.stamped_manifest(cache, REPO, "main", WANTED, []) == m
    assert hub_cache.stamped_manifest(cache, REPO, "main", ["*.json"], []) is None  # other patterns, other list


def test_download_links_the_snapshot_verifies_and_a_rerun_hashes_nothing(stand_in, tmp_path):
    _server, url = stand_in
    cache = str(tmp_path / "cache")
    m = manifest(url)
    assert hub_cache.bytes_on_disk(cache, m, m["files"]) == 0 and len(hub_cache.missing(cache, m)) == 5
    hub_fetch.fetch_hub(cache, m, TOKEN, url, 4)
    hub_cache.link_snapshot(cache, m)
    assert hub_cache.missing(cache, m) == [] and not hub_cache.links_needed(cache, m)
    snap = hub_cache.snapshot_dir(cache, REPO, m["commit"])
    for path in ("config.json", BIG, "sub/extra.txt"):
        with open(os.path.join(snap, path), "rb") as f:
            assert f.read() == FILES[path]
    assert open(os.path.join(cache, "models--acme--tiny", "refs", "main")).read() == m["commit"]
    assert not os.path.exists(os.path.join(snap, "notes.md"))
    hashed, hashed_bytes, bad = hub_verify.verify(cache, m)
    assert (hashed, hashed_bytes, bad) == (5, m["bytes"], [])
    assert hub_verify.verify(cache, m)[:2] == (0, 0)  # the stamp: nothing changed, nothing hashed
    served = control(url, "/_stats")["bytes"]
    hub_fetch.fetch_hub(cache, m, TOKEN, url, 4)
    assert control(url, "/_stats")["bytes"] == served  # a second fetch transfers nothing


def test_a_dropped_connection_resumes_with_a_range_request(stand_in, tmp_path):
    _server, url = stand_in
    m = manifest(url)
    control(url, "/_faults", {"drop": {BIG: 12 << 20}})
    hub_fetch.fetch_hub(str(tmp_path / "cache"), m, TOKEN, url, 4)
    stats = control(url, "/_stats")
    ranges = [r["range"] for r in stats["requests"] if r["range"] and BIG in r["path"]]
    assert ranges == ["bytes=%d-" % (10 << 20)]  # what huggingface_hub had written: one 10 MiB read
    served = stats["by_path"]["acme/tiny/" + BIG]
    assert served == (12 << 20) + len(FILES[BIG]) - (10 << 20)  # not the whole file twice
    assert hub_verify.verify(str(tmp_path / "cache"), m)[2] == []


def test_a_killed_download_leaves_finished_files_and_the_rerun_fetches_only_the_rest(stand_in, tmp_path):
    _server, url = stand_in
    m = manifest(url)
    cache = str(tmp_path / "cache")
    control(url, "/_faults", {"rate": {BIG: 1 << 20}})  # the big file takes ~24 s
    code = ("import sys, json; sys.path[:0] = %r;"
            "from ansible_collections.gpuserve.llm.plugins.module_utils import hub_fetch;"
            "hub_fetch.fetch_hub(%r, json.loads(sys.argv[1]), %r, %r, 4)" % (sys.path, cache, TOKEN, url))
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(m)])
    small = [f for f in m["files"] if f["path"] != BIG]
    deadline = time.time() + 30
    while time.time() < deadline and hub_cache.missing(cache, dict(m, files=small)):
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    assert hub_cache.missing(cache, m) == [f for f in m["files"] if f["path"] == BIG]
    control(url, "/_reset", {})
    hub_fetch.fetch_hub(cache, m, TOKEN, url, 4)
    assert list(control(url, "/_stats")["by_path"]) == ["acme/tiny/" + BIG]
    hub_cache.link_snapshot(cache, m)
    assert hub_verify.verify(cache, m)[2] == []


def test_a_corrupt_file_is_named_removed_and_fetched_again(stand_in, tmp_path):
    _server, url = stand_in
    m = manifest(url)
    cache = str(tmp_path / "cache")
    control(url, "/_faults", {"corrupt": ["model-00002-of-00002.safetensors"]})
    hub_fetch.fetch_hub(cache, m, TOKEN, url, 4)
    hub_cache.link_snapshot(cache, m)
    _hashed, _bytes, bad = hub_verify.verify(cache, m)
    assert [b["path"] for b in bad] == ["model-00002-of-00002.safetensors"]
    assert bad[0]["kind"] == "sha256" and bad[0]["size"] == bad[0]["expected_size"]
    hub_cache.remove_bad(cache, m, bad)
    assert [f["path"] for f in hub_cache.missing(cache, m)] == ["model-00002-of-00002.safetensors"]
    control(url, "/_faults", {"corrupt": []})
    hub_fetch.fetch_hub(cache, m, TOKEN, url, 4)
    hub_cache.link_snapshot(cache, m)
    assert hub_verify.verify(cache, m)[:3:2] == (1, [])  # only the fetched-again file hashed


def test_a_mirror_folder_as_a_checkout_or_a_hub_cache(stand_in, root, tmp_path):
    _server, url = stand_in
    m = manifest(url)
    checkout = str(root / "acme" / "tiny")
    cache = str(tmp_path / "cache")
    hub_fetch.fetch_folder(cache, m, checkout, hub_cache.missing(cache, m))
    hub_cache.link_snapshot(cache, m)
    assert hub_verify.verify(cache, m)[2] == []
    other = str(tmp_path / "other")
    hub_fetch.fetch_folder(other, m, cache, hub_cache.missing(other, m))  # a hub cache (say an NFS share) as the mirror
    hub_cache.link_snapshot(other, m)
    assert hub_verify.verify(other, m)[2] == []
    assert control(url, "/_stats")["by_path"] == {}
    with pytest.raises(hub_manifest.HubError) as gone:
        hub_fetch.fetch_folder(str(tmp_path / "third"), m, str(tmp_path), m["files"])
    assert gone.value.code == "E_DOWNLOAD" and "is not in the mirror folder" in gone.value.message


@pytest.fixture
def rsync_daemon(tmp_path):
    """A real rsync daemon serving a cache, password-protected, as the weights stage runs it."""
    served = tmp_path / "served"
    served.mkdir()
    (tmp_path / "secrets").write_text("gpuserve:pw-unit-SECRET\n")
    os.chmod(str(tmp_path / "secrets"), 0o600)
    # A port the system has free now: the playbook tests, running beside, hold ports of their own.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "rsyncd.conf").write_text(
        "pid file = %s/rsyncd.pid\nport = %d\naddress = 127.0.0.1\nuse chroot = no\n"
        "[gpuserve-hf]\n path = %s\n read only = yes\n uid = %d\n gid = %d\n auth users = gpuserve\n"
        " secrets file = %s/secrets\n hosts allow = 127.0.0.1\n"
        % (tmp_path, port, served, os.getuid(), os.getgid(), tmp_path))
    subprocess.run(["rsync", "--daemon", "--config=%s/rsyncd.conf" % tmp_path], check=True)
    time.sleep(0.5)
    yield str(served), "rsync://gpuserve@127.0.0.1:%d/gpuserve-hf" % port
    subprocess.run(["pkill", "--pidfile", "%s/rsyncd.pid" % tmp_path], check=False)


def run(argv, environ_update=None):
    """What AnsibleModule.run_command gives the module: (rc, stdout, stderr)."""
    proc = subprocess.run(argv, env=dict(os.environ, **(environ_update or {})), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_peer_copies_over_rsync_and_a_wrong_password_is_e_download(stand_in, rsync_daemon, tmp_path):
    _server, url = stand_in
    served, rsync_url = rsync_daemon
    m = manifest(url)
    hub_fetch.fetch_hub(served, m, TOKEN, url, 4)
    hub_cache.link_snapshot(served, m)
    peer = str(tmp_path / "peer")
    os.makedirs(peer)
    with pytest.raises(hub_manifest.HubError) as refused:
        hub_fetch.fetch_rsync(peer, m, rsync_url, "wrong-SECRET", m["files"], run)
    assert refused.value.code == "E_DOWNLOAD" and "auth failed" in refused.value.message
    assert "SECRET" not in refused.value.message
    hub_fetch.fetch_rsync(peer, m, rsync_url, "pw-unit-SECRET", m["files"], run)
    hub_cache.link_snapshot(peer, m)
    assert hub_cache.missing(peer, m) == [] and hub_verify.verify(peer, m)[2] == []


def test_the_gguf_the_engine_loads_is_one_model_its_first_shard():
    def files(*names):
        return {"repo_id": "x/y", "commit": "c" * 40, "files": [{"path": n} for n in names]}
    assert hub_manifest.gguf_model(files("m-Q4_K_M.gguf", "README.md", "mmproj-F16.gguf")) == "m-Q4_K_M.gguf"
    assert hub_manifest.gguf_model(files("Q4/m-Q4-00002-of-00002.gguf", "Q4/m-Q4-00001-of-00002.gguf")) == \
        "Q4/m-Q4-00001-of-00002.gguf"
    with pytest.raises(hub_manifest.HubError) as many:
        hub_manifest.gguf_model(files("m-Q4_K_M.gguf", "m-Q8_0.gguf"))
    assert many.value.code == "E_CONFIG" and "pick 2 GGUF models" in many.value.message


def test_progress_counts_transfers_in_flight_and_stale_leftovers_go(tmp_path):
    m = {"repo_id": REPO, "files": [{"path": "a", "etag": "e" * 64, "size": 100},
                                    {"path": "b", "etag": "f" * 40, "size": 50}]}
    blobs = tmp_path / "models--acme--tiny" / "blobs"
    (blobs / ".rsync-partial").mkdir(parents=True)
    (blobs / ("e" * 64 + ".1a2b3c4d.incomplete")).write_bytes(b"x" * 30)  # huggingface_hub's
    (blobs / ".rsync-partial" / ("f" * 40)).write_bytes(b"x" * 20)  # rsync's
    assert hub_cache.bytes_on_disk(str(tmp_path), m, m["files"]) == 50
    line = progress.progress_line({"phase": "fetching x", "done": 50 << 20, "total": 200 << 20, "started": 100,
                                   "phase_started": 100}, now=110)
    assert line == "fetching x: 50.0 MiB of 200.0 MiB (25%), 5.0 MiB/s, 10 s"
    assert hub_cache.clean_stale(str(tmp_path), REPO, now=time.time()) == 0
    assert hub_cache.clean_stale(str(tmp_path), REPO, now=time.time() + 3600) == 1
    assert os.path.exists(str(blobs / ".rsync-partial" / ("f" * 40)))  # rsync resumes these: kept
    shutil.rmtree(str(blobs))
