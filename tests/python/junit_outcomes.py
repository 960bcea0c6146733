"""Prints one line per test case of a pytest JUnit XML report: outcome, id, message.

Used by tests/redis_py_suite.rs, which reads what redis-py's own suite did. The outcome is
passed, failed, error (setup or teardown failed; it wins over failed) or skipped (xfail
included); the id is the test's class path without the leading `tests.` and its name, such as
`test_commands.TestRedisCommands.test_select`; the message is the first line of pytest's.
Fields are separated by a tab.
"""

import sys
import xml.etree.ElementTree as ET


def outcome_of(case):
    tags = {child.tag: child for child in case}
    for tag in ("error", "failure", "skipped"):
        if tag in tags:
            message = tags[tag].get("message") or (tags[tag].text or "")
            kind = {"error": "error", "failure": "failed", "skipped": "skipped"}[tag]
            return kind, message
    return "passed", ""


def main(path):
    for case in ET.parse(path).iter("testcase"):
        classname = case.get("classname", "")
        if classname.startswith("tests."):
            classname = classname[len("tests.") :]
        kind, message = outcome_of(case)
        first_line = message.strip().splitlines()[0] if message.strip() else ""
        print(f"{kind}\t{classname}.{case.get('name')}\t{first_line.replace(chr(9), ' ')}")


if __name__ == "__main__":
    main(sys.argv[1])
