"""A stand-in for `bazel` in the CPU tests of tools/test.sh and tools/run_matrix.sh.

Records its argv (JSON) to $FAKE_BAZEL_ARGV, writes one JUnit XML per result of $FAKE_BAZEL_RESULTS
(JSON: [[label, {case: outcome}, skip message], ...]) under $FAKE_BAZEL_TESTLOGS, writes the build
events naming them where --build_event_json_file says, and exits $FAKE_BAZEL_RC (default 0).
"""

import json
import os
import sys

from tools.results.testlogs_testing import write_bep, write_xml

args = sys.argv[1:]
with open(os.environ["FAKE_BAZEL_ARGV"], "w") as f:
    json.dump(args, f)
results = []
for label, outcomes, skip_message in json.loads(os.environ.get("FAKE_BAZEL_RESULTS", "[]")):
    xml = os.path.join(os.environ["FAKE_BAZEL_TESTLOGS"], label.strip("/").replace(":", "/"), "test.xml")
    results.append((label, write_xml(xml, outcomes, skip_message), "PASSED"))
bep = [a.split("=", 1)[1] for a in args if a.startswith("--build_event_json_file=")]
if bep:
    write_bep(bep[-1], results, command=args[0], patterns=[a for a in args if a.startswith("//")])
sys.exit(int(os.environ.get("FAKE_BAZEL_RC", "0")))
