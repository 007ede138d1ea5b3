#!/usr/bin/env python3
"""Turns the headers' plain // comments on declarations into Doxygen comments (comments only).

    python3 scripts/to_doxygen_comments.py include/lockstep/<module>/*.h

The one-off migration that issue 24 ran over every public header: it resolves the warnings of
`make docs` for every declaration that already had a comment; the rest need writing. A
"// ---- section ----" heading right above a declaration becomes /// too: turn it back. Check the result with
`make docs` and a comment-stripped diff (g++ -fpreprocessed -dD -E -P FILE).

A run of full-line // comments at namespace or class scope directly followed by a declaration
becomes ///; a trailing // comment on a declaration line (ending in ; or , or {) becomes ///<.
Comments inside function bodies, before preprocessor lines, blank lines or access specifiers
stay as they are."""
import re, sys

SCOPE_RE = re.compile(r'^\s*(template\s*<.*>\s*)?(namespace|class|struct|union|enum)\b')

def convert(text):
    lines = text.split('\n')
    out = list(lines)
    stack = []  # 'scope' or 'body'
    pending_scope_line = False
    i = 0
    def in_scope():
        return all(k == 'scope' for k in stack)
    # first pass: compute context per line (context at line start)
    ctx = []
    stmt = ''
    for line in lines:
        ctx.append(in_scope())
        code = re.sub(r'//.*', '', line)
        code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
        code = re.sub(r"'(\\.|[^'\\])*'", "''", code)
        stripped = code.strip()
        if stripped.startswith('#'):
            continue
        stmt += ' ' + stripped
        for ch in code:
            if ch == '{':
                head = stmt.split(';')[-1]
                kind = 'scope' if SCOPE_RE.match(head) and '=' not in head.split('{')[0] and '(' not in head.split('{')[0] else 'body'
                stack.append(kind)
                stmt = ''
            elif ch == '}':
                if stack:
                    stack.pop()
                stmt = ''
            elif ch == ';':
                stmt = ''
    n = len(lines)
    i = 0
    while i < n:
        line = lines[i]
        if re.match(r'^\s*//(?!/)', line) and ctx[i]:
            j = i
            while j < n and re.match(r'^\s*//(?!/)', lines[j]):
                j += 1
            nxt = lines[j].strip() if j < n else ''
            ok = (nxt and not nxt.startswith('#') and not nxt.startswith('}') and
                  not re.match(r'^(public|private|protected)\s*:', nxt) and ctx[j])
            if ok:
                for k in range(i, j):
                    out[k] = re.sub(r'^(\s*)//(?!/)', r'\1///', lines[k], count=1)
            i = j
            continue
        if ctx[i] and not re.match(r'^\s*//', line):
            m = re.match(r'^(.*?[;,{])(\s+)//(?!/)(.*)$', line)
            if m and '"' not in m.group(1).split('//')[0][-1:] and m.group(1).count('"') % 2 == 0:
                head = m.group(1).strip()
                if not head.startswith('#') and not re.match(r'^(public|private|protected)', head):
                    out[i] = m.group(1) + m.group(2) + '///<' + m.group(3)
        i += 1
    return '\n'.join(out)

for path in sys.argv[1:]:
    src = open(path).read()
    new = convert(src)
    if new != src:
        open(path, 'w').write(new)
