"""Which unit test files touch Ansible's code, read from their source (tests/unit/conftest.py uses it).

The unit tests run under both ansible-core releases the collection supports (tests/run.sh). A file that imports
nothing of Ansible, directly or through the collection's module_utils, the tests' helpers and the conftest.py files
above it, and starts no process (no ansible-playbook, no module run) gives the same result under both: it runs once,
under the newest. The rule is kept conservative: an import of Ansible or of a module that starts processes or
imports by name (subprocess, importlib, multiprocessing, pty, runpy, asyncio), a relative import, a name with
"ansible" in it, or a call that starts a process or runs code by name (system, popen, fork, exec*, spawn*,
importorskip, run_path, exec, eval, ...) counts as touching Ansible, wherever it is found.
"""
import ast
import os

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
OWN = "ansible_collections.gpuserve.llm."
PROCESS_MODULES = ("ansible", "subprocess", "importlib", "multiprocessing", "pty", "runpy", "asyncio")
RUNNING_CALLS = ("system", "popen", "fork", "forkpty", "importorskip", "import_module", "__import__", "run_path",
                 "run_module", "create_subprocess_exec", "create_subprocess_shell", "exec", "eval")


def _source_of(module, here):
    """The file of a module imported by a test: the collection's (a module or a package's __init__), or a helper
    beside the test or in tests/; None otherwise (the standard library and installed packages)."""
    if module.startswith(OWN):
        base = os.path.join(ROOT, *module[len(OWN):].split("."))
        candidates = (base + ".py", os.path.join(base, "__init__.py"))
    else:
        candidates = (os.path.join(here, module + ".py"), os.path.join(TESTS, module + ".py"))
    return next((p for p in candidates if os.path.isfile(p)), None)


def _conftests(path, top):
    """The conftest.py files pytest loads for a test file: its folder's and those above it, up to `top`."""
    folder = os.path.dirname(os.path.abspath(path))
    found = []
    while folder.startswith(top):
        conftest = os.path.join(folder, "conftest.py")
        if os.path.isfile(conftest) and conftest != os.path.abspath(path):
            found.append(conftest)
        folder = os.path.dirname(folder)
    return found


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield "." * node.level + (node.module or "")
                continue
            yield node.module
            yield from ("%s.%s" % (node.module, alias.name) for alias in node.names)


def touches_core(path, top=TESTS, _seen=None):
    """The reason `path` touches Ansible (a string), or None where it touches nothing of it. `top`: the folder
    whose conftest.py files, and those below it on the way to `path`, count."""
    seen = set() if _seen is None else _seen
    if path in seen:
        return None
    seen.add(path)
    with open(path) as f:
        tree = ast.parse(f.read())
    name = os.path.relpath(path, ROOT)
    for node in ast.walk(tree):
        word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if "ansible" in word.lower():
            return "%s uses %s" % (name, word)
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in RUNNING_CALLS or called.startswith(("exec", "spawn", "posix_spawn")):
                return "%s calls %s" % (name, called)
    for module in _imports(tree):
        if module.startswith("."):
            return "%s imports %s (relative: not followed)" % (name, module)
        if module.split(".")[0] in PROCESS_MODULES or (
                module.startswith("ansible_collections.") and not module.startswith(OWN)):
            return "%s imports %s" % (name, module)
        source = _source_of(module, os.path.dirname(path))
        reason = source and touches_core(source, top, seen)
        if reason:
            return reason
    if _seen is None:  # the test file itself: the fixtures and hooks it runs with
        for conftest in _conftests(path, top):
            reason = touches_core(conftest, top, seen)
            if reason:
                return reason
    return None
