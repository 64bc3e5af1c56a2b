"""Each request of the refusals mode as its log line gives it (name, status, what followed), in two device logs."""
import re
import sys

LINE = re.compile(r"^ *[0-9.]+ (.{44}) (\d{3}|None) (.*?) in ([0-9.]+) s( -> .*)?$")


def rows(path):
    out = {}
    for line in open(path):
        m = LINE.match(line.rstrip("\n"))
        if m:
            out[m.group(1).strip()] = (m.group(2), m.group(3), (m.group(5) or "").strip())
    return out


a, b = rows(sys.argv[1]), rows(sys.argv[2])
print("request | %s | %s | same status, message/media tokens and after" % (sys.argv[1], sys.argv[2]))
for name in list(a) + [n for n in b if n not in a]:
    x, y = a.get(name), b.get(name)
    print("%s | %s | %s | %s" % (name, x and x[0], y and y[0], "yes" if x == y else "NO: %r / %r" % (x, y)))
print("requests: %d and %d; differing: %d" % (len(a), len(b), sum(1 for n in set(a) | set(b) if a.get(n) != b.get(n))))
