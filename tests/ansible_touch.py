"""Which unit test files touch Ansible's own code, read from their source (tests/unit/conftest.py uses it).

The unit tests run under both ansible-core releases the collection supports (tests/run.sh). A file that imports
nothing of Ansible, directly or through the collection's module_utils and the tests' helpers, and starts no process
(no ansible-playbook, no module run) gives the same result under both: it runs once, under the first. The rule is
kept conservative: an import of Ansible, of subprocess or importlib, a name with "ansible" in it, or a process
started, in the file or in any of the collection's or the tests' files it imports, counts as touching Ansible.
"""
import ast
import os

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
OWN = "ansible_collections.gpuserve.llm."


def _source_of(module, here):
    """The file of a module imported by a test: the collection's, or a helper beside the tests; None otherwise."""
    if module.startswith(OWN):
        path = os.path.join(ROOT, *module[len(OWN):].split(".")) + ".py"
    else:
        path = next((p for p in (os.path.join(here, module + ".py"), os.path.join(TESTS, module + ".py"))
                     if os.path.isfile(p)), None)
    return path if path and os.path.isfile(path) else None


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from ("%s.%s" % (node.module, alias.name) for alias in node.names)


def touches_ansible(path, _seen=None):
    """The reason `path` touches Ansible (a string), or None where it touches nothing of it."""
    seen = set() if _seen is None else _seen
    if path in seen:
        return None
    seen.add(path)
    with open(path) as f:
        tree = ast.parse(f.read())
    name = os.path.relpath(path, ROOT)
    for node in ast.walk(tree):
        word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if "ansible" in word.lower() or word in ("__import__", "import_module"):
            return "%s uses %s" % (name, word)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" and (
                word in ("system", "popen", "fork") or word.startswith(("exec", "spawn", "posix_spawn"))):
            return "%s starts a process (os.%s)" % (name, word)
    for module in _imports(tree):
        if module.split(".")[0] in ("ansible", "subprocess", "importlib", "multiprocessing") or (
                module.startswith("ansible_collections.") and not module.startswith(OWN)):
            return "%s imports %s" % (name, module)
        source = _source_of(module, os.path.dirname(path))
        reason = source and touches_ansible(source, seen)
        if reason:
            return reason
    return None
