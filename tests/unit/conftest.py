"""Under ansible-core 2.19 (tests/run.sh sets GPUSERVE_UNIT_TOUCHING_ANSIBLE=1 where the newest runs too), only the
files that touch Ansible's code run: the others answer the same under the newest (tests/core_touch.py says which
and why)."""
import os

from core_touch import touches_core


def pytest_collection_modifyitems(config, items):
    if os.environ.get("GPUSERVE_UNIT_TOUCHING_ANSIBLE") != "1":
        return
    verdict = {}
    for item in items:
        path = str(item.path)
        if path not in verdict:
            verdict[path] = touches_core(path)
    kept = [item for item in items if verdict[str(item.path)]]
    left = [item for item in items if not verdict[str(item.path)]]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    config.core_free_files = sorted(os.path.basename(p) for p, why in verdict.items() if not why)


def pytest_report_collectionfinish(config):
    files = getattr(config, "core_free_files", None)
    if files:
        return "touching no Ansible code, run under the newest ansible-core only: %s" % ", ".join(files)
    return None
