"""TEST PLUMBING: the tasks that took the most wall time over a test run, from the JSON lines that
tests/callback_plugins/task_times.py wrote (one file or more).

    python tests/task_times.py FILE... [--top N]
"""
import collections
import json
import sys


def summary(paths, top=30):
    """Lines: each task's total wall time over the runs, how often it ran and its longest run, the largest first."""
    total, count, longest = collections.Counter(), collections.Counter(), {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    row = json.loads(line)
                    total[row["task"]] += row["s"]
                    count[row["task"]] += 1
                    longest[row["task"]] = max(longest.get(row["task"], 0), row["s"])
        except FileNotFoundError:
            continue
    lines = ["%d tasks run, %.0f s of task wall time in all" % (sum(count.values()), sum(total.values()))]
    for task, seconds in total.most_common(top):
        lines.append("%7.1f s %5dx  longest %6.1f s  %s" % (seconds, count[task], longest[task], task[:110]))
    return lines


if __name__ == "__main__":
    args = sys.argv[1:]
    top = 30
    if "--top" in args:
        top = int(args[args.index("--top") + 1])
        del args[args.index("--top"):args.index("--top") + 2]
    print("\n".join(summary(args, top)))
