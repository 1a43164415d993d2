#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The tree's layout rules (docs/ARCHITECTURE.md), checked.

1. Which folder may include which: every `#include "x.h"` of a source file
   resolves to its own folder first, then to the folders its folder may use.
   An include that resolves only to a folder it may not use is an error
   (e.g. tools/ including a ckptd/ header).
2. No file of the daemon over LONG_LINES lines unless its opening comment
   says it is one concept ("One concept: ...").

Usage: layout.py SOURCE_ROOT. Exit status 0 when the tree keeps the rules.
"""
import os
import re
import sys

# folder -> the folders whose headers it may include (besides its own).
ALLOWED = {
    "include": [],
    "proto": ["include"],
    "libckpt": ["include", "proto"],
    "store": ["include", "proto"],
    "s3": ["include", "proto"],
    "ckptd": ["include", "proto", "store", "s3"],
    "tools": ["include", "proto", "store", "s3"],
    "trainer": ["include"],
    "bench": ["include", "proto", "store", "s3"],
}
# Generated into the build directory's root; every folder may include it.
GENERATED = {"ckpt-build-config.h"}
LONG_LINES = 1000
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def headers_of(root, folder):
    out = set()
    for dirpath, _, files in os.walk(os.path.join(root, folder)):
        for f in files:
            if f.endswith(".h"):
                out.add(f)
    return out


def sources_of(root, folder):
    for dirpath, _, files in os.walk(os.path.join(root, folder)):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.join(dirpath, f)


def opening_comment(text):
    # The SPDX line is a comment of its own: the opening comment is the
    # first one after it.
    for c in re.finditer(r"/\*.*?\*/", text, re.S):
        if "SPDX" not in c.group(0):
            return c.group(0)
    return ""


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    folders = list(ALLOWED)
    headers = {f: headers_of(root, f) for f in folders}
    errors = []
    for folder in folders:
        for path in sources_of(root, folder):
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            for name in INCLUDE.findall(text):
                base = os.path.basename(name)
                if base in GENERATED or base in headers[folder]:
                    continue
                if any(base in headers[f] for f in ALLOWED[folder]):
                    continue
                owners = [f for f in folders if base in headers[f]]
                where = ", ".join(f + "/" for f in owners) or "no source folder"
                errors.append(f"{rel}: includes \"{name}\", which is in {where}; "
                              f"{folder}/ may use only "
                              f"{', '.join(d + '/' for d in ALLOWED[folder]) or 'itself'}")
            if folder == "ckptd" and path.endswith(".c"):
                lines = text.count("\n")
                comment = re.sub(r"[\s*]+", " ", opening_comment(text)).lower()
                if lines > LONG_LINES and "one concept" not in comment:
                    errors.append(f"{rel}: {lines} lines, over {LONG_LINES}, and its "
                                  "opening comment does not say which one concept it is "
                                  "(\"One concept: ...\")")
    for e in errors:
        print("layout: " + e)
    if errors:
        print(f"layout: {len(errors)} rule(s) broken (see docs/ARCHITECTURE.md)")
        return 1
    print("layout: every include and every daemon file keeps the rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
