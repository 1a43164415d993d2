#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fill ckptd.8 from ckptd.8.in: @OPTIONS@ becomes every option of
`ckptd --help` (the option table in ckptd/config.c), so the manual can never
name a setting, default or variable the daemon does not have.

Usage: gen-ckptd-man.py CKPTD TEMPLATE OUTPUT SYSCONFDIR
(@SYSCONFDIR@ becomes the installed configuration directory.)
"""
import re
import subprocess
import sys


def roff_text(line):
    """One line of plain text as roff: escape backslashes and hyphens of
    options, protect a leading dot or quote."""
    line = line.replace("\\", "\\e")
    line = re.sub(r"(?<![\w-])--([a-z])", r"\\-\\-\1", line)
    if line.startswith((".", "'")):
        line = "\\&" + line
    return line


def options_section(help_text):
    lines = help_text.splitlines()
    try:
        start = lines.index("OPTIONS") + 1
    except ValueError:
        sys.exit("gen-ckptd-man: no OPTIONS section in ckptd --help")
    end = next((i for i in range(start, len(lines))
                if lines[i] and not lines[i].startswith(" ")), len(lines))
    out = []
    for line in lines[start:end]:
        if not line.strip():
            continue
        if re.match(r"^ {4}-", line):          # "    --key ARG" or "    -h, --help"
            flags = line.strip()
            m = re.match(r"^((?:-\S+,? ?)+?)(?: ([^-].*))?$", flags)
            names, arg = (m.group(1).strip(), m.group(2)) if m else (flags, None)
            names = names.replace("-", "\\-")
            out.append(".TP")
            out.append(".BI \"%s \" \"%s\"" % (names, arg) if arg else ".B %s" % names)
        elif re.match(r"^ {8}\S", line):
            text = line.strip()
            if text.startswith(("Default:", "Environment:")):
                out.append(".br")
            out.append(roff_text(text))
        else:
            sys.exit("gen-ckptd-man: unexpected line in OPTIONS: %r" % line)
    return "\n".join(out)


def main():
    ckptd, template, output, sysconfdir = sys.argv[1:5]
    help_text = subprocess.run([ckptd, "--help"], check=True, capture_output=True,
                               text=True, env={"PATH": "/usr/bin:/bin"}).stdout
    with open(template, encoding="utf-8") as f:
        page = f.read()
    if "@OPTIONS@" not in page:
        sys.exit("gen-ckptd-man: no @OPTIONS@ in " + template)
    page = page.replace("@OPTIONS@", options_section(help_text))
    page = page.replace("@SYSCONFDIR@", sysconfdir)
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)


main()
