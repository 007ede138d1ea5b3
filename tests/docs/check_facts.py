#!/usr/bin/env python3
"""Holds statements of the README and docs/ that can be checked against the tree.

  * README.md is at most 150 lines (the rest belongs in docs/);
  * every "N modules" (a number or a number word) in README.md and docs/architecture.md says as
    many modules as src/modules.txt declares, and docs/architecture.md's diagram and table name
    each of them;
  * public headers (include/lockstep/) cite no project-internal history: no "issue #N", no
    "design sketch", no "the article";
  * every Strategy factory of the public headers (dist::OneDeviceStrategy, MirroredStrategy,
    MultiWorkerMirroredStrategy, TPUStrategy, ...) is in docs/distributed.md's tf.distribute table.

    check_facts.py [ROOT]      exit status 0 when every check passes; each failure is one line
"""
import os
import re
import sys

WORDS = {w: i for i, w in enumerate(
    'zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen '
    'fifteen sixteen seventeen eighteen nineteen twenty'.split())}
README_MAX_LINES = 150
INTERNAL = re.compile(r'issue\s*#\s*\d+|\(issue \d+\)|design sketch|the article', re.I)


def read(root, rel):
    with open(os.path.join(root, rel), encoding='utf-8') as f:
        return f.read()


def modules(root):
    out = []
    for line in read(root, 'src/modules.txt').splitlines():
        line = line.split('#', 1)[0].strip()
        if line:
            out.append(line.split()[0])
    return out


def check_readme_length(root):
    n = len(read(root, 'README.md').splitlines())
    if n > README_MAX_LINES:
        return [f'README.md: {n} lines, more than {README_MAX_LINES}: move detail into docs/']
    return []


def check_module_count(root):
    mods = modules(root)
    errors = []
    for rel in ('README.md', 'docs/architecture.md'):
        text = read(root, rel)
        for m in re.finditer(r'\b(\w+)\s+modules\b', text):
            word = m.group(1).lower()
            n = int(word) if word.isdigit() else WORDS.get(word)
            if n is None:
                continue
            if n != len(mods):
                line = text.count('\n', 0, m.start()) + 1
                errors.append(f'{rel}:{line}: says "{m.group(0)}", src/modules.txt declares '
                              f'{len(mods)}')
    arch = read(root, 'docs/architecture.md')
    diagram = re.search(r'^```\n(core .*?)^```', arch, re.S | re.M)
    if not diagram:
        errors.append('docs/architecture.md: no module diagram (a code block starting "core")')
    for mod in mods:
        if diagram and not re.search(rf'(?<![\w]){mod}(?![\w])', diagram.group(1)):
            errors.append(f'docs/architecture.md: the module diagram lacks {mod}')
        if not re.search(rf'^\| {mod} \|', arch, re.M):
            errors.append(f'docs/architecture.md: the module table has no row for {mod}')
    return errors


def check_headers(root):
    errors = []
    top = os.path.join(root, 'include')
    for dirpath, _, files in os.walk(top):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            for i, line in enumerate(open(path, encoding='utf-8'), 1):
                m = INTERNAL.search(line)
                if m:
                    errors.append(f'{rel}:{i}: cites project history ("{m.group(0)}"); a public '
                                  f'header says what the code does')
    return errors


def check_strategies(root):
    decl = re.compile(r'^(?:inline\s+)?Strategy\s+(\w+Strategy)\(', re.M)
    names = set()
    for h in ('include/lockstep/distribute/strategy.h', 'include/lockstep/distribute/xla_strategy.h'):
        names |= set(decl.findall(read(root, h)))
    text = read(root, 'docs/distributed.md')
    table = '\n'.join(l for l in text.splitlines() if l.startswith('| `dist::'))
    return [f'docs/distributed.md: the tf.distribute table lacks dist::{n}'
            for n in sorted(names) if f'dist::{n}(' not in table]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), '..', '..'))
    checks = [check_readme_length, check_module_count, check_headers, check_strategies]
    errors = [e for c in checks for e in c(root)]
    for e in errors:
        print(e)
    if not errors:
        print(f'{len(checks)} checks passed: README length, module count ({len(modules(root))}), '
              f'public headers, strategies in docs/distributed.md')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
