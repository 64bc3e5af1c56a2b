"""The restart guard: no daemon restart or Docker package change under someone else's containers."""
import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import docker_restart
from ansible_collections.gpuserve.llm.plugins.module_utils.docker_restart import decide

DAEMON = "unix:///var/run/docker.sock"


def container(name, state="running", own=False, labels=None):
    """One entry as Docker's API (docker_host_info with verbose_output) lists it."""
    labels = dict(labels or {})
    if own:
        labels[docker_restart.OWN_LABELS[0]] = "gpuserve-llm"
    return {"Id": "%064x" % abs(hash(name)), "Names": ["/" + name], "Labels": labels, "State": state,
            "Status": "Up 2 hours" if state == "running" else "Exited (0) 1 hour ago"}


FLEET = [container("gpuserve-llm-a", own=True), container("postgres"), container("jupyter", state="paused"),
         container("old-build", state="exited")]


@pytest.mark.parametrize("need", ["none", "reload"])
def test_a_reload_never_stops_anything(need):
    assert decide(FLEET, live_restore=False, need=need) == {"go": True, "stops": [], "foreign": [], "stranded": [], "finding": None}


@pytest.mark.parametrize("need", ["restart", "package"])
def test_foreign_live_containers_refuse_a_restart_naming_them(need):
    got = decide(FLEET, live_restore=False, need=need, daemon=DAEMON)
    assert got["go"] is False
    assert got["stops"] == ["gpuserve-llm-a", "jupyter", "postgres"]  # an exited container has nothing to lose
    assert got["foreign"] == ["jupyter", "postgres"]
    f = got["finding"]
    assert f["code"] == "E_DOCKER_RESTART" and f["subject"] == DAEMON
    assert f["details"] == {"containers": ["jupyter", "postgres"], "need": need, "live_restore": False}
    assert "would stop 2 container(s) the collection does not own: jupyter, postgres (live-restore is off); stop " \
           "them, turn live-restore on first (a reload applies it), or set host_docker_restart: allow" in f["message"]
    assert f["message"].startswith(docker_restart.WHAT[need] + " at " + DAEMON)
    assert "host_docker_restart: allow" in f["fix"]


def test_allow_goes_and_says_what_stops():
    got = decide(FLEET, live_restore=False, need="restart", policy="allow")
    assert got["go"] is True and got["finding"] is None
    assert got["stops"] == ["gpuserve-llm-a", "jupyter", "postgres"] and got["foreign"] == ["jupyter", "postgres"]


def test_live_restore_on_lets_a_restart_and_a_patch_upgrade_go():
    assert decide(FLEET, live_restore=True, need="restart")["go"] is True
    patch = decide(FLEET, live_restore=True, need="package", versions=("20.10.24+dfsg1-1", "20.10.25+dfsg1-1"))
    assert patch == {"go": True, "stops": [], "foreign": [], "stranded": [], "finding": None}


def test_live_restore_must_stay_on_in_the_configuration_the_daemon_restarts_with():
    # Seen on dockerd 20.10.24: a daemon started with live-restore off kills what the old one left running (137).
    got = decide(FLEET, live_restore=True, live_restore_after=False, need="restart")
    assert got["go"] is False and got["foreign"] == ["jupyter", "postgres"]
    assert "(live-restore is off in the configuration the daemon restarts with)" in got["finding"]["message"]
    assert decide(FLEET, live_restore=True, live_restore_after=True, need="restart")["go"] is True
    # Turning it on in the file does not protect this restart: the running daemon stops its containers.
    assert decide(FLEET, live_restore=False, live_restore_after=True, need="restart")["go"] is False


def test_live_restore_does_not_carry_containers_across_release_lines_or_to_a_new_data_root():
    upgrade = decide(FLEET, live_restore=True, need="package", versions=("20.10.24+dfsg1-1+deb12u1",
                                                                         "5:27.3.1-1~debian.12~bookworm"))
    assert upgrade["go"] is False and upgrade["foreign"] == ["jupyter", "postgres"]
    assert ("(live-restore holds within one release line only, and this goes from 20.10 to 27.3); stop them or set "
            "host_docker_restart: allow") in upgrade["finding"]["message"]
    moved = decide(FLEET, live_restore=True, need="data_root")
    assert moved["go"] is False and moved["finding"]["details"]["live_restore"] is True
    assert "(live-restore does not carry containers to a new data root); stop them or set host_docker_restart: " \
           "allow" in moved["finding"]["message"]


def test_a_data_root_move_strands_the_old_roots_images_unless_allowed():
    # Only the collection's own engine runs, but the old root holds images the new root would not see.
    ours = [container("gpuserve-llm-a", own=True)]
    images = ["gpuserve/llama.cpp:1-0.7.0", "postgres:16", "a", "b", "c", "d"]
    moved = decide(ours, live_restore=True, need="data_root", images=images, daemon=DAEMON)
    assert moved["go"] is False and moved["foreign"] == [] and moved["stranded"] == sorted(images)
    f = moved["finding"]
    assert f["code"] == "E_DOCKER_RESTART" and f["details"]["images"] == sorted(images)
    assert "would strand the 6 image(s) the old data root holds: a, b, c, d, gpuserve/llama.cpp:1-0.7.0, ..." \
           in f["message"]
    assert "stop or move them or set host_docker_restart: allow" in f["message"]
    # A foreign container and images: both named in one finding.
    both = decide(FLEET, live_restore=True, need="data_root", images=["postgres:16"])
    assert "jupyter, postgres" in both["finding"]["message"] and "postgres:16" in both["finding"]["message"]
    assert decide(ours, live_restore=True, need="data_root", images=[])["go"] is True  # an empty old root
    assert decide(ours, live_restore=True, need="data_root", images=images, policy="allow")["go"] is True
    # Images never stop a restart on the same root.
    assert decide(ours, live_restore=False, need="restart", images=images)["stranded"] == []


def test_only_the_collections_own_or_stopped_containers_go():
    ours = [container("gpuserve-llm-a", own=True), container("gpuserve-llm-b", own=True, state="exited"),
            container("leftover", state="exited"),
            # The engine's front and the router's containers are the collection's too.
            container("gpuserve-llm-front", labels={"gpuserve.llm.front": "gpuserve-llm-front"}),
            container("gpuserve-router", labels={"gpuserve.llm.router": "gpuserve-router"})]
    got = decide(ours, live_restore=False, need="restart")
    assert got == {"go": True, "stops": ["gpuserve-llm-a", "gpuserve-llm-front", "gpuserve-router"], "foreign": [],
                   "stranded": [], "finding": None}
    assert decide([], live_restore=False, need="package")["go"] is True  # no daemon yet: nothing to stop


def test_a_listing_without_labels_or_state_is_read_safely():
    # docker_host_info without verbose_output lists Names and Status only: ownership unknown, so not ours.
    bare = [{"Id": "abc", "Names": ["/gpuserve-llm-a"], "Status": "Up 5 minutes"},
            {"Id": "def", "Names": ["/done"], "Status": "Exited (0) 2 days ago"},
            {"Id": "0123456789abcdef", "Status": "Up 1 second"}]
    got = decide(bare, live_restore=False, need="restart")
    assert got["go"] is False and got["foreign"] == ["0123456789ab", "gpuserve-llm-a"]


def test_release_lines_and_bad_arguments():
    assert docker_restart.release_line("5:27.3.1-1~debian.12~bookworm") == "27.3"
    assert docker_restart.release_line("26.1.5+dfsg1-9+b9") == "26.1"
    assert docker_restart.release_line("") is None
    # An unknown candidate version: live-restore is trusted, as for a plain restart.
    assert decide(FLEET, live_restore=True, need="package", versions=("20.10.24", None))["go"] is True
    with pytest.raises(ValueError):
        decide(FLEET, live_restore=False, need="upgrade")
    with pytest.raises(ValueError):
        decide(FLEET, live_restore=False, need="restart", policy="yes")
