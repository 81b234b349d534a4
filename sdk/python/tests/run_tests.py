#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Runs pytest for ctest, reporting a skip as a skip.

usage: run_tests.py TEST_DIR PATTERN [PATTERN...] [-- PYTEST_ARGS...]

Runs the test files of TEST_DIR matching the glob PATTERNs with pytest (the
Debian package python3-pytest) in this process. Exit status: 0 when nothing
failed and at least one test passed; 77 (ctest's SKIP_RETURN_CODE) when
nothing failed but every test was skipped (no daemon binary, not root...) or
pytest is not installed; 1 on any failure or error, or when no test was
found at all.
"""

import glob
import os
import sys

SKIPPED = 77


class Outcomes:
    """A pytest plugin counting test outcomes (setup/teardown errors included)."""

    def __init__(self):
        self.passed = self.skipped = self.failed = 0
        self.reasons = []

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed += 1
        elif report.skipped:
            self.skipped += 1
            if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
                self.reasons.append(report.longrepr[2])
        elif report.passed and report.when == "call":
            self.passed += 1

    def pytest_collectreport(self, report):
        if report.failed:
            self.failed += 1


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    start, patterns = args[0], args[1:]
    files = sorted({f for p in patterns for f in glob.glob(os.path.join(start, p))})
    if not files:
        print("no test files under %s matching %s" % (start, patterns), file=sys.stderr)
        return 1
    sys.dont_write_bytecode = True  # nothing written into the source tree
    try:
        import pytest
    except ImportError:
        print("SKIPPED: pytest is not installed (apt-get install python3-pytest)")
        return SKIPPED
    outcomes = Outcomes()
    rc = pytest.main(["-v", "-rs", "-p", "no:cacheprovider", *extra, *files], plugins=[outcomes])
    if rc not in (0, 5) or outcomes.failed:
        return 1
    if outcomes.passed > 0:
        return 0
    if outcomes.skipped > 0:
        for r in outcomes.reasons:
            print("SKIPPED: %s" % r)
        return SKIPPED
    print("no tests ran from %s" % files, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
