"""A stand-in for `bazel` in the CPU tests of tools/test.sh and tools/run_matrix.sh.

Records its argv (JSON) to $FAKE_BAZEL_ARGV and appends it to $FAKE_BAZEL_ARGV.all (one line per
invocation), writes one JUnit XML per result of $FAKE_BAZEL_RESULTS (JSON: [[label, {case: outcome},
skip message, optional tags], ...]) that the tag filters keep (tag_filters) under $FAKE_BAZEL_TESTLOGS (under
<output base>/testlogs for a startup --output_base, as Bazel keeps each output base's results apart), writes
the build events naming them, their tags and times where --build_event_json_file says, and exits
$FAKE_BAZEL_RC (default 0), or 4 as Bazel does when the tag filters left no test target.
`bazel info output_base` prints $FAKE_BAZEL_OUTPUT_BASE.
"""

import json
import os
import sys
import time

from tools.results.unit.testlogs_testing import write_bep, write_xml

began = time.time()
args = sys.argv[1:]
with open(os.environ["FAKE_BAZEL_ARGV"], "w") as f:
    json.dump(args, f)
with open(os.environ["FAKE_BAZEL_ARGV"] + ".all", "a") as f:
    f.write(json.dumps(args) + "\n")
startup = {}
while args and args[0].startswith("--"):  # startup options come before the command
    name, _, value = args.pop(0)[2:].partition("=")
    startup[name] = value
if args[:2] == ["info", "output_base"]:
    print(os.environ["FAKE_BAZEL_OUTPUT_BASE"])
    sys.exit(0)
testlogs = os.path.join(startup["output_base"], "testlogs") if "output_base" in startup else None


def tag_filters(args: list[str]) -> list[str]:
    """--test_tag_filters as Bazel resolves it: the workspace .bazelrc's `test` line, then each
    --config's `test:<name>` lines and the command line's own, in order; the last one wins."""
    rc: dict[str, list[str]] = {}
    if os.path.exists(".bazelrc"):
        for line in open(".bazelrc"):
            parts = line.split()
            if len(parts) == 2 and parts[1].startswith("--test_tag_filters="):
                rc.setdefault(parts[0], []).append(parts[1])
    value = ""
    for a in rc.get("test", []) + [
        o for arg in args for o in (rc.get("test:" + arg[9:], []) if arg.startswith("--config=") else [arg])
    ]:
        if a.startswith("--test_tag_filters="):
            value = a.split("=", 1)[1]
    return [t for t in value.split(",") if t]


filters = tag_filters(args)
wanted = [t for t in filters if not t.startswith("-")]
unwanted = [t[1:] for t in filters if t.startswith("-")]
results, configured = [], {}
for label, outcomes, skip_message, *tags in json.loads(os.environ.get("FAKE_BAZEL_RESULTS", "[]")):
    tags = tags[0] if tags else []
    if (wanted and not set(wanted) & set(tags)) or set(unwanted) & set(tags):
        continue
    root = testlogs or os.environ["FAKE_BAZEL_TESTLOGS"]
    xml = os.path.join(root, label.strip("/").replace(":", "/"), "test.xml")
    results.append((label, write_xml(xml, outcomes, skip_message), "PASSED"))
    configured[label] = tags
bep = [a.split("=", 1)[1] for a in args if a.startswith("--build_event_json_file=")]
if bep:
    write_bep(
        bep[-1],
        results,
        command=args[0],
        patterns=[a for a in args if a.startswith("//")],
        tags=configured,
        span=(began, time.time()),
        attempt_began={xml: began for _, xml, _ in results},
    )
if filters and not results:
    print("ERROR: No test targets were found, yet testing was requested", file=sys.stderr)
    sys.exit(4)
sys.exit(int(os.environ.get("FAKE_BAZEL_RC", "0")))
