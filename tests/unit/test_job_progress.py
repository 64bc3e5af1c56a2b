"""job_progress: how the roles' progress loops wait for a background job (async task or container)."""
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "plugins", "modules", "job_progress.py")


def run(tmp_path, **args):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    start = time.time()
    out = subprocess.run([sys.executable, MODULE, str(path)], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")), check=False)
    return json.loads(out.stdout), time.time() - start


def started(tmp_path):
    """A results file as Ansible's async wrapper writes it while the job runs."""
    results = tmp_path / "job"
    results.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1"}))
    return results


def finish_later(results, seconds, outcome):
    def write():
        time.sleep(seconds)
        tmp = str(results) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(outcome, f)
        os.rename(tmp, str(results))  # the wrapper replaces the file whole
    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_answers_when_the_job_ends_not_when_the_wait_is_over(tmp_path):
    results = started(tmp_path)
    writer = finish_later(results, 1.0, {"changed": True, "failed": True, "msg": "E_SMOKE: no reply"})
    result, took = run(tmp_path, results_file=str(results), wait=60)
    writer.join()
    assert result["finished"] and result["line"] == "done"
    assert result["job"]["msg"] == "E_SMOKE: no reply" and result["job"]["failed"]
    assert took < 20  # the job ended after 1 s; a look at the end of the wait would take 60


def test_a_running_job_is_watched_for_the_whole_wait_then_its_progress_is_the_line(tmp_path):
    results = started(tmp_path)
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"line": "step 3 of 9: Tool calls", "started": time.time() - 42}))
    result, took = run(tmp_path, results_file=str(results), progress_file=str(progress), wait=2)
    assert not result["finished"] and "job" not in result
    assert result["line"].startswith("step 3 of 9: Tool calls, 4")
    assert took >= 2


def test_no_wait_is_one_look_and_no_progress_file_says_starting(tmp_path):
    result, took = run(tmp_path, results_file=str(started(tmp_path)))
    assert not result["finished"] and result["line"] == "starting"


def test_a_daemon_that_does_not_answer_is_e_docker_naming_it_and_the_container(tmp_path):
    sock = "unix://" + str(tmp_path / "no-daemon.sock")
    result, _took = run(tmp_path, container="gpuserve-llm-autotune", docker_host=sock, wait=5)
    assert result["failed"] and result["msg"].startswith("E_DOCKER: the Docker daemon at %s" % sock)
    assert "gpuserve-llm-autotune" in result["msg"] and result["finding"]["code"] == "E_DOCKER"
    assert "systemctl start docker" in result["finding"]["fix"]


def test_a_results_file_or_a_container_not_both(tmp_path):
    result, _took = run(tmp_path, results_file=str(started(tmp_path)), container="c")
    assert result["failed"] and "mutually exclusive" in result["msg"]
    result, _took = run(tmp_path, wait=1)
    assert result["failed"] and "one of the following is required" in result["msg"]
