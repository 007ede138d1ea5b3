#!/usr/bin/env python3
"""Lists every skipped test of a ctest run and fails on a skip the allow-list does not name.

Usage: check_skips.py JUNIT_XML [ALLOWLIST]

JUNIT_XML is what `ctest --output-junit FILE` wrote (make test-release writes
build/ctest-release.xml). A test is skipped when ctest did not count it as run: a gtest case that
printed "[  SKIPPED ]" (GTEST_SKIP), a script test that exited with its SKIP_RETURN_CODE (77), or
a disabled test. Each is printed with its reason (the GTEST_SKIP message, or the script's last
output lines). ALLOWLIST (default tests/skip_allowlist.txt) holds lines `REGEX | reason`; a skip
whose full test name a REGEX matches is expected, any other fails the run (exit 1): where
everything is installed, as in CI, a skip hides a broken set-up. docs/architecture.md ("Testing") describes it.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))


def load_allowlist(path):
    entries = []
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            regex, sep, reason = line.partition("|")
            if not sep or not regex.strip() or not reason.strip():
                sys.exit(f"{path}:{number}: expected `REGEX | reason`, got: {line}")
            entries.append((re.compile(regex.strip()), reason.strip(), number))
    return entries


def skip_reason(output):
    """The GTEST_SKIP message (the lines between "...: Skipped" and "[  SKIPPED ]"), else the
    last non-empty lines of the output (a script's own reason before its exit 77)."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped"):
            reason = []
            for more in lines[i + 1:]:
                if more.startswith("[  SKIPPED ]"):
                    break
                reason.append(more.strip())
            text = " ".join(r for r in reason if r)
            if text:
                return text
    tail = [l.strip() for l in lines if l.strip() and not l.startswith("[")]
    return " / ".join(tail[-2:]) if tail else "(no reason printed)"


def skipped_tests(junit_path):
    root = ET.parse(junit_path).getroot()
    for case in root.iter("testcase"):
        status = case.get("status", "")
        skipped = case.find("skipped")
        if status == "run" or (status == "" and skipped is None):
            continue
        if status not in ("notrun", "disabled", "skipped") and skipped is None:
            continue  # "fail": ctest reports failures itself
        out = case.findtext("system-out") or ""
        reason = skip_reason(out)
        if status == "disabled":
            reason = "disabled: " + reason
        elif reason == "(no reason printed)" and skipped is not None:
            reason = skipped.get("message") or reason
        yield case.get("name"), reason


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    junit = argv[1]
    allow_path = argv[2] if len(argv) > 2 else os.path.join(HERE, "..", "tests", "skip_allowlist.txt")
    if not os.path.exists(junit):
        sys.exit(f"check_skips: {junit} not found (run ctest with --output-junit)")
    allow = load_allowlist(allow_path)
    skips = sorted(skipped_tests(junit))
    unexpected = []
    print(f"check_skips: {len(skips)} skipped test(s) in {junit}")
    for name, reason in skips:
        match = next((e for e in allow if e[0].fullmatch(name)), None)
        if match:
            print(f"  allowed   {name}: {reason}\n            (allow-list line {match[2]}: {match[1]})")
        else:
            print(f"  UNEXPECTED {name}: {reason}")
            unexpected.append(name)
    if unexpected:
        print(f"check_skips: {len(unexpected)} skip(s) not on {allow_path}; "
              "install what they name (scripts/setup.sh), or, where the cause cannot be fixed "
              "on this machine, add `REGEX | reason` there and its reason to docs/architecture.md")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
