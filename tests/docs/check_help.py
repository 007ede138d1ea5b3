#!/usr/bin/env python3
"""Checks that each program's flags, its --help and docs/cli.md agree.

    check_help.py --build-dir BUILD [--guide docs/cli.md]

For `lockstep` (its commands), each `lockstep <command>` and each example program (every
program in examples/ and docs/examples/ that takes a flag must be in PROGRAMS), three sets of
flags are compared:
  * the flags the program accepts, read from its source's flag table: the string literals that
    are a whole flag ("--epochs") in the region of the source that parses them (a CommandSpec,
    a list of known options, or `== "--flag"` comparisons);
  * the flags its --help prints: those in the usage line(s) and those that start an option line
    (before the description column);
  * the flags docs/cli.md lists for it: the first column of the table under its heading.
Any flag in one set and not in another is a mismatch, reported with where each set came from.
-h/--help are left out (every program takes them). Exit status 0 when all agree.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
FLAG = r'-{1,2}[a-z][a-z0-9-]*'
WHOLE_FLAG_LITERAL = re.compile(r'"(' + FLAG + r')"')
COMPARED_FLAG = re.compile(r'==\s*"(' + FLAG + r')"')
TOKEN = re.compile(r'(?<![\w./-])(' + FLAG + r')')
IGNORED = {'-h', '--help'}

# program (as docs/cli.md heads it) -> (argv for --help, source file, region start, region end,
# how its flags are written there: "literals" = every whole-flag string literal in the region,
# "compared" = only those compared with ==)
PROGRAMS = {
    'lockstep summary': (['lockstep', 'summary'], 'examples/cli/model_files.h',
                         r'CommandSpec spec\{"summary"', r'\};', 'literals'),
    'lockstep predict': (['lockstep', 'predict'], 'examples/cli/predict.h',
                         r'CommandSpec spec\{"predict"', r'\};', 'literals'),
    'lockstep train': (['lockstep', 'train'], 'examples/cli/train.h',
                       r'CommandSpec spec\{', r'\};', 'literals'),
    'lockstep generate': (['lockstep', 'generate'], 'examples/cli/generate.h',
                          r'CommandSpec spec\{"generate"', r'\};', 'literals'),
    'lockstep convert': (['lockstep', 'convert'], 'examples/cli/model_files.h',
                         r'CommandSpec spec\{"convert"', r'\};', 'literals'),
    'lockstep export-image-folder': (['lockstep', 'export-image-folder'], 'examples/lockstep.cpp',
                                     r'std::vector<std::string> known = \{', r'\};', 'literals'),
    'lockstep export-text-folder': (['lockstep', 'export-text-folder'], 'examples/lockstep.cpp',
                                    r'^int export_text_folder\(', r'\};', 'literals'),
    'lockstep ops-doc': (['lockstep', 'ops-doc'], 'examples/lockstep.cpp',
                         r'^int ops_doc\(', r'^\}', 'compared'),
    'lockstep export-onnx': (['lockstep', 'export-onnx'], 'src/onnx/export_command.cpp',
                             r'^int export_command\(', r'^\}', 'compared'),
    'lockstep report': (['lockstep', 'report'], 'src/viz/report_plots.cpp',
                        r'^int report_command\(', r'^\}', 'compared'),
    'fashion_mnist': (['fashion_mnist'], 'examples/fashion_mnist.cpp',
                      r'^static Args parse\(', r'^\}', 'compared'),
    'flowers': (['flowers'], 'examples/flowers.cpp', r'^static Args parse\(', r'^\}', 'compared'),
    'distributed_train': (['distributed_train'], 'examples/distributed_train.cpp',
                          r'^int main\(', r'^\}', 'compared'),
    'collective_worker': (['collective_worker'], 'examples/collective_worker.cpp',
                          r'^int main\(', r'^\}', 'compared'),
    # The examples of docs/examples/ name their flags in parse_example_args's list (one line).
    'data_parallel': (['data_parallel'], 'docs/examples/data_parallel.cpp',
                      r'parse_example_args\(', r'\);', 'literals'),
    'two_outputs': (['two_outputs'], 'docs/examples/two_outputs.cpp', r'parse_example_args\(',
                    r'\);', 'literals'),
    'text_classification': (['text_classification'], 'examples/text_classification.cpp',
                            r'parse_example_args\(', r'\);', 'literals'),
    'gpt': (['gpt'], 'examples/gpt.cpp', r'parse_example_args\(', r'\);', 'literals'),
}


def source_region(path, start, end):
    lines = open(os.path.join(ROOT, path), encoding='utf-8').read().split('\n')
    for i, l in enumerate(lines):
        m = re.search(start, l)
        if m:
            if re.search(end, l[m.end():]):  # the region is one line
                return l
            for j in range(i + 1, len(lines)):
                if re.search(end, lines[j]):
                    return '\n'.join(lines[i:j + 1])
    raise SystemExit(f'{path}: no region from /{start}/ to /{end}/ (did the source change? '
                     'update tests/docs/check_help.py)')


def source_flags(path, start, end, how):
    text = source_region(path, start, end)
    pattern = WHOLE_FLAG_LITERAL if how == 'literals' else COMPARED_FLAG
    return set(pattern.findall(text)) - IGNORED


def help_flags(text):
    flags, in_usage = set(), False
    for line in text.split('\n'):
        if line.startswith('usage:'):
            in_usage = True
            flags |= set(TOKEN.findall(line))
            continue
        if in_usage and re.match(r'^\s+\[', line):
            flags |= set(TOKEN.findall(line))
            continue
        in_usage = False
        m = re.match(r'^\s+(' + FLAG + r'.*?)(?:\s{2,}|$)', line)
        if m:
            flags |= set(TOKEN.findall(m.group(1)))
    return flags - IGNORED


def run_help(build, argv):
    exe = os.path.join(build, 'bin', argv[0])
    r = subprocess.run([exe] + argv[1:] + ['--help'], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit(f'{" ".join(argv)} --help exited {r.returncode}:\n{r.stdout}{r.stderr}')
    return r.stdout + r.stderr


def guide_sections(path):
    """heading text -> the flags in the first column of the tables under it."""
    sections, current = {}, None
    for line in open(path, encoding='utf-8'):
        m = re.match(r'^#{2,4}\s+(.*?)\s*$', line)
        if m:
            current = m.group(1).strip('` ')
            sections[current] = set()
            continue
        if current is not None and line.startswith('|') and not line.startswith('|---'):
            first = re.split(r'(?<!\\)\|', line)[1]  # a \| inside a cell is not a column
            if first.strip() in ('flag', 'command'):
                continue
            for code in re.findall(r'`([^`]*)`', first):
                sections[current] |= set(TOKEN.findall(code))
    return sections


def commands_in_source():
    text = source_region('examples/lockstep.cpp', r'^const Command kCommands\[\] = \{', r'^\};',)
    return set(re.findall(r'^\s*\{"([a-z-]+)",', text, re.M))


def uncovered_programs():
    """The example programs (examples/*.cpp, docs/examples/*.cpp) that take a flag but that
    PROGRAMS does not check: every one that does must be there."""
    covered = {argv[0] for argv, *_ in PROGRAMS.values()}
    missing = []
    for folder in ('examples', os.path.join('docs', 'examples')):
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if not name.endswith('.cpp'):
                continue
            text = open(os.path.join(ROOT, folder, name), encoding='utf-8').read()
            if WHOLE_FLAG_LITERAL.search(text) and name[:-4] not in covered:
                missing.append(os.path.join(folder, name))
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build-dir', required=True)
    ap.add_argument('--guide', default=os.path.join(ROOT, 'docs', 'cli.md'))
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    guide = os.path.relpath(a.guide, ROOT)
    sections = guide_sections(a.guide)
    problems = []

    # lockstep itself: its commands.
    in_source = commands_in_source()
    top_help = run_help(build, ['lockstep'])
    in_help = set(re.findall(r'^  ([a-z][a-z-]+)\s{2,}', top_help, re.M))
    table = {line.split('|')[1].strip().strip('`').split()[1]
             for line in open(a.guide, encoding='utf-8')
             if re.match(r'^\|\s*`lockstep [a-z-]+`\s*\|', line)}
    for what, names in (('lockstep --help', in_help), (f'{guide} (its command table)', table)):
        if names != in_source:
            problems.append(f'lockstep commands: examples/lockstep.cpp kCommands has '
                            f'{sorted(in_source)}, {what} has {sorted(names)}')
    for cmd in sorted(in_source):
        if f'lockstep {cmd}' not in PROGRAMS:
            problems.append(f'lockstep {cmd}: a command this test does not know; add it to '
                            'PROGRAMS in tests/docs/check_help.py')

    for path in uncovered_programs():
        problems.append(f'{path}: a program that takes flags, but tests/docs/check_help.py does '
                        'not check it: add it to PROGRAMS (and its --help and cli.md section)')

    for program, (argv, path, start, end, how) in PROGRAMS.items():
        accepted = source_flags(path, start, end, how)
        helped = help_flags(run_help(build, argv))
        if program not in sections:
            problems.append(f'{program}: {guide} has no section "### {program}"')
            documented = None
        else:
            documented = sections[program]
        checks = [(f'`{" ".join(argv)} --help`', helped)]
        if documented is not None:
            checks.append((f'{guide} "### {program}"', documented))
        for where, flags in checks:
            missing, extra = accepted - flags, flags - accepted
            if missing:
                problems.append(f'{program}: {where} does not list {sorted(missing)}, which '
                                f'{path} accepts')
            if extra:
                problems.append(f'{program}: {where} lists {sorted(extra)}, which {path} does '
                                'not accept')
        print(f'{program}: {len(accepted)} flag(s): source, --help and {guide} '
              + ('agree' if not any(p.startswith(program + ':') for p in problems) else 'DIFFER'))
    for p in problems:
        print('MISMATCH ' + p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
