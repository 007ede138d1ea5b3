#!/usr/bin/env python3
"""Keeps the C++ shown in the docs from going stale.

Every ```cpp block in the given Markdown files is either
  * marked as included from a file the build compiles, by the line right above it:
        <!-- include docs/examples/quickstart.cpp -->          the whole file
        <!-- include examples/flowers.cpp:pipeline -->         the lines between
                                                               `// docs: begin pipeline` and
                                                               `// docs: end pipeline`
    and then it must equal that file or region (the region dedented), character for character; or
  * compiled here: all of one file's other blocks go into one translation unit, each block as
    the body of its own function (or, marked `<!-- compile: file -->`, at namespace scope in its
    own namespace), after tests/docs/snippet_prelude.h, which includes the public headers and
    declares the names fragments use without defining them (model, x_train, ...). `#include`
    lines are hoisted to the top. One `g++ -fsyntax-only` per Markdown file; errors point at
    the Markdown file's lines (#line).

    check_snippets.py [--cxx g++] [--expect-failure] FILE.md...
    check_snippets.py --update FILE.md...   rewrites each included block from its file

It also checks that every relative link ([text](path) or [text](path#anchor)) outside code
blocks names a file that exists and, for a Markdown file, a heading that exists.

Exit status 0 when every block and link passes. With --expect-failure (the fixture check) the status is
0 only when every block of every file fails: each compiled block with an error inside its own
lines, each included block by differing from its file.
"""
import argparse
import concurrent.futures
import difflib
import os
import re
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
FENCE = re.compile(r'^(\s*)```\s*([\w+-]*)\s*$')
INCLUDE = re.compile(r'^<!--\s*include\s+(\S+?)(?::([\w-]+))?\s*-->\s*$')
COMPILE = re.compile(r'^<!--\s*compile:\s*(\w+)\s*-->\s*$')
CPP = {'cpp', 'c++', 'cxx'}


def blocks(path):
    """Yields (language, first content line number (1-based), lines, directive line)."""
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and lines[j].strip() != '```':
            j += 1
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1:j]]
        directive = lines[i - 1].strip() if i > 0 else ''
        yield lang, i + 2, body, directive
        i = j + 1


def region(path, name):
    text = open(path, encoding='utf-8').read().split('\n')
    if name is None:
        if text and text[-1] == '':
            text = text[:-1]
        return text
    begin = [k for k, l in enumerate(text) if l.strip() == f'// docs: begin {name}']
    end = [k for k, l in enumerate(text) if l.strip() == f'// docs: end {name}']
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        raise ValueError(f'{path}: no single "// docs: begin {name}" ... "// docs: end {name}"')
    return textwrap.dedent('\n'.join(text[begin[0] + 1:end[0]])).split('\n')


def check_include(md, line, body, target, name):
    path = os.path.join(ROOT, target)
    try:
        want = region(path, name)
    except (OSError, ValueError) as e:
        return [f'{md}:{line}: the block says it is included from {target}: {e}']
    if [l.rstrip() for l in body] == [l.rstrip() for l in want]:
        return []
    diff = '\n'.join(difflib.unified_diff(want, body, f'{target}' + (f':{name}' if name else ''),
                                          f'{md}:{line}', lineterm=''))
    return [f'{md}:{line}: the block differs from {target}' + (f':{name}' if name else '') +
            ' (copy the file into the block, or fix the file):\n' + diff]


def translation_unit(md, compiled):
    head, parts = ['#include "snippet_prelude.h"'], []
    for k, (line, body, mode) in enumerate(compiled):
        code = []
        for l in body:
            if re.match(r'^\s*#\s*include\b', l):
                head.append(l.strip())
                code.append('')  # keep the line numbers
            else:
                code.append(l)
        if mode == 'file':
            parts.append(f'namespace docs_snippet_{k} {{\n#line {line} "{md}"\n' +
                         '\n'.join(code) + '\n}')
        else:
            parts.append(f'namespace docs_snippet_{k} {{\n[[maybe_unused]] void run() {{\n'
                         f'#line {line} "{md}"\n' + '\n'.join(code) + '\n}\n}')
    return '\n'.join(head) + '\n' + '\n'.join(parts) + '\n'


def compile_unit(cxx, md, compiled):
    src = translation_unit(md, compiled)
    with tempfile.NamedTemporaryFile('w', suffix='.cpp', delete=False) as f:
        f.write(src)
        name = f.name
    try:
        cmd = [cxx, '-std=c++20', '-fsyntax-only', '-Wall', '-Wno-unused-variable',
               '-Wno-unused-but-set-variable', '-I', os.path.join(ROOT, 'include'),
               '-I', os.path.dirname(os.path.abspath(__file__)), name]
        r = subprocess.run(cmd, capture_output=True, text=True)
        return r.returncode, r.stderr
    finally:
        os.unlink(name)


def check_file(md, cxx):
    """Returns (errors, included blocks, compiled blocks, compiler output)."""
    rel = os.path.relpath(md, ROOT)
    errors, included, compiled = [], [], []
    for lang, line, body, directive in blocks(md):
        if lang not in CPP:
            continue
        inc, comp = INCLUDE.match(directive), COMPILE.match(directive)
        if inc:
            included.append(line)
            errors += [(line, e) for e in check_include(rel, line, body, inc.group(1), inc.group(2))]
        else:
            mode = comp.group(1) if comp else 'body'
            if mode not in ('body', 'file'):
                errors.append((line, f'{rel}:{line}: unknown "<!-- compile: {mode} -->" (body or file)'))
                continue
            compiled.append((line, body, mode))
    out = ''
    if compiled:
        rc, out = compile_unit(cxx, rel, compiled)
        if rc != 0:
            bad = sorted({int(m.group(1)) for m in
                          re.finditer(re.escape(rel) + r':(\d+):\d+: error', out)})
            attributed = False
            for line, body, _ in compiled:
                hit = [b for b in bad if line <= b < line + len(body)]
                if hit:
                    attributed = True
                    errors.append((line, f'{rel}:{line}: the block does not compile (first error '
                                         f'at line {hit[0]})'))
            if not attributed:
                errors.append((0, f'{rel}: the snippets do not compile'))
    return errors, included, [c[0] for c in compiled], out


def update(md):
    lines = open(md, encoding='utf-8').read().split('\n')
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        m = FENCE.match(lines[i])
        inc = INCLUDE.match(lines[i - 1].strip()) if m and i > 0 else None
        if m and inc and m.group(2).lower() in CPP:
            j = i + 1
            while j < len(lines) and lines[j].strip() != '```':
                j += 1
            out += [m.group(1) + l if l else l
                    for l in region(os.path.join(ROOT, inc.group(1)), inc.group(2))]
            i = j
            continue
        i += 1
    open(md, 'w', encoding='utf-8').write('\n'.join(out))


def heading_anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in open(path, encoding='utf-8'):
        m = re.match(r'^#+\s+(.*?)\s*$', line)
        if m:
            out.add(re.sub(r'[^\w\- ]', '', m.group(1).lower()).replace(' ', '-'))
    return out


def check_links(md):
    rel = os.path.relpath(md, ROOT)
    text = open(md, encoding='utf-8').read()
    text = re.sub(r'```.*?```', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    errors = []
    for m in re.finditer(r'\]\(([^)\s]+)\)', text):
        link = m.group(1)
        if re.match(r'^[a-z]+:', link):
            continue
        line = text.count('\n', 0, m.start()) + 1
        path, _, anchor = link.partition('#')
        target = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(md)), path)) \
            if path else os.path.abspath(md)
        if not os.path.exists(target):
            errors.append(f'{rel}:{line}: the link {link} names a file that does not exist')
        elif anchor and target.endswith('.md') and anchor not in heading_anchors(target):
            errors.append(f'{rel}:{line}: the link {link} names no heading of {path or rel}')
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--cxx', default=os.environ.get('CXX', 'g++'))
    ap.add_argument('--expect-failure', action='store_true')
    ap.add_argument('--update', action='store_true',
                    help='rewrite every included block from its file (after editing the file)')
    ap.add_argument('files', nargs='+')
    a = ap.parse_args()
    if a.update:
        for md in a.files:
            update(md)
        return 0
    status = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda md: check_file(md, a.cxx), a.files))
    for md, (errors, included, compiled, out) in zip(a.files, results):
        rel = os.path.relpath(md, ROOT)
        if a.expect_failure:
            failed = {e[0] for e in errors}
            missed = [l for l in included + compiled if l not in failed]
            if missed:
                status = 1
                print(f'{rel}: the checker accepted blocks it must reject, at lines {missed}')
            else:
                print(f'{rel}: all {len(included) + len(compiled)} broken blocks rejected, as '
                      f'they must be:')
                for _, e in errors:
                    print('  ' + e.split('\n')[0])
            continue
        link_errors = check_links(md)
        if errors or link_errors:
            status = 1
            for _, e in errors:
                print(e)
            for e in link_errors:
                print(e)
            if out:
                print(out)
        else:
            print(f'{rel}: {len(included)} block(s) equal their files, {len(compiled)} compiled')
    return status


if __name__ == '__main__':
    sys.exit(main())
