#!/usr/bin/env python3
"""Runs every shell command a guide shows, in order, as a reader following it would.

    run_guide_commands.py --build-dir BUILD GUIDE.md

Each ```sh block of the guide is one bash script (`set -eo pipefail`), run in one scratch
folder per guide (so a block can use what an earlier one wrote) in which `build` points at
BUILD and `docs`, `examples`, `include` and `scripts` at the sources (so it looks like the
repository root to the commands, but what they write stays there): `build/bin/fashion_mnist`
and `lockstep` (BUILD/bin is on PATH) run as shown.

The short config, so that a guide's commands take seconds:
  * LOCKSTEP_FASHION_MNIST_DIR points at the first 512 training and 128 test images of
    Fashion-MNIST (written here from Debian's dataset-fashion-mnist, or from the folder that
    variable names), so every program that trains on it sees a small dataset;
  * `--epochs N` is run as `--epochs 2` when N > 2.
Launchers: OpenMPI may run as root here (OMPI_ALLOW_RUN_AS_ROOT), and `srun` is a stand-in
(tests/docs/fake_srun.sh) that starts the tasks on this host with Slurm's environment, when
Slurm itself is not installed.

A block may be preceded by a directive comment, `<!-- docs-test: ... -->`, with any of
  not run: REASON          the block is not run (the build commands the suite itself ran);
  replace A => B, C => D   text replacements before running ($PORT0..$PORT3 are free ports);
  parallel                 the block's commands are workers meant for different hosts: they
                           run side by side (in the background) and must all succeed;
  expect TEXT              the block's output must contain TEXT;
  epochs as shown          no --epochs cap (a block whose timing needs its epochs).
Exit status: 0 all blocks passed, 1 a block failed, 77 (skip) without Fashion-MNIST.
"""
import argparse
import gzip
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, '..', '..'))
FENCE = re.compile(r'^\s*```\s*([\w+-]*)\s*$')
DIRECTIVE = re.compile(r'^<!--\s*docs-test:\s*(.*?)\s*-->\s*$')
MAX_EPOCHS = 2


def sh_blocks(path):
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() != '```':
            j += 1
        if m.group(1).lower() in ('sh', 'bash', 'shell', 'console'):
            d = DIRECTIVE.match(lines[i - 1].strip()) if i > 0 else None
            yield i + 1, '\n'.join(l.strip('\n') for l in lines[i + 1:j]), d.group(1) if d else ''
        i = j + 1


def parse_directive(text):
    out = {'not_run': None, 'replace': [], 'expect': [], 'parallel': False, 'cap': True}
    for part in re.split(r';\s*(?=(?:not run|replace|expect|parallel|epochs)\b)', text):
        part = part.strip()
        if not part:
            continue
        if part.startswith('not run:'):
            out['not_run'] = part[len('not run:'):].strip()
        elif part.startswith('replace '):
            for pair in part[len('replace '):].split(','):
                a, b = pair.split('=>')
                out['replace'].append((a.strip(), b.strip()))
        elif part == 'epochs as shown':
            out['cap'] = False
        elif part == 'parallel':
            out['parallel'] = True
        elif part.startswith('expect '):
            out['expect'].append(part[len('expect '):].strip())
        else:
            raise SystemExit(f'unknown docs-test directive: {part}')
    return out


def side_by_side(script):
    """Runs each command of the script in the background; exports and assignments first."""
    commands, current = [], ''
    for line in script.split('\n'):
        if not current and (not line.strip() or line.lstrip().startswith('#')):
            continue
        current += line + '\n'
        if not line.rstrip().endswith('\\'):
            commands.append(current.rstrip())
            current = ''
    out = []
    for c in commands:
        if re.match(r'^(export\s|[A-Za-z_]\w*=\S*\s*(#.*)?$)', c):
            out.append(c)
        else:
            out.append(c + ' &\npids+=($!)')
    out.append('for p in "${pids[@]}"; do wait "$p"; done')
    return '\n'.join(out)


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(('127.0.0.1', 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def small_fashion_mnist(dest, n_train=512, n_test=128):
    src = os.environ.get('LOCKSTEP_FASHION_MNIST_DIR', '/usr/share/datasets/fashion-mnist')
    files = {'train-images-idx3-ubyte.gz': (n_train, 16, 784), 'train-labels-idx1-ubyte.gz':
             (n_train, 8, 1), 't10k-images-idx3-ubyte.gz': (n_test, 16, 784),
             't10k-labels-idx1-ubyte.gz': (n_test, 8, 1)}
    if not all(os.path.exists(os.path.join(src, f)) for f in files):
        return None
    os.makedirs(dest, exist_ok=True)
    for name, (n, header, per) in files.items():
        with gzip.open(os.path.join(src, name), 'rb') as f:
            data = bytearray(f.read(header + n * per))
        data[4:8] = n.to_bytes(4, 'big')  # the item count
        with gzip.open(os.path.join(dest, name), 'wb') as f:
            f.write(bytes(data))
    return dest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build-dir', required=True)
    ap.add_argument('--keep', action='store_true', help='keep the scratch folder')
    ap.add_argument('guide')
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    guide = os.path.relpath(os.path.abspath(a.guide), ROOT)
    blocks = list(sh_blocks(a.guide))
    if not blocks:
        print(f'{guide}: no shell commands')
        return 0
    work = tempfile.mkdtemp(prefix='docs-' + os.path.basename(guide).replace('.md', '') + '-')
    data = small_fashion_mnist(os.path.join(work, '.fashion-mnist-small'))
    if data is None:
        print('Fashion-MNIST is not installed (dataset-fashion-mnist): skipped')
        shutil.rmtree(work)
        return 77
    os.symlink(build, os.path.join(work, 'build'))
    for folder in ('docs', 'examples', 'include', 'scripts'):  # the sources, read only
        os.symlink(os.path.join(ROOT, folder), os.path.join(work, folder))
    env = dict(os.environ)
    env.update({'LOCKSTEP_FASHION_MNIST_DIR': data, 'OMPI_ALLOW_RUN_AS_ROOT': '1',
                'OMPI_ALLOW_RUN_AS_ROOT_CONFIRM': '1', 'OMPI_MCA_rmaps_base_oversubscribe': '1',
                'PATH': os.path.join(build, 'bin') + os.pathsep + env.get('PATH', '')})
    if not shutil.which('srun', path=env['PATH']):
        shims = os.path.join(work, '.shims')
        os.makedirs(shims)
        os.symlink(os.path.join(HERE, 'fake_srun.sh'), os.path.join(shims, 'srun'))
        env['PATH'] = shims + os.pathsep + env['PATH']
    ran, not_run, status = 0, [], 0
    started = time.time()
    for line, script, directive in blocks:
        d = parse_directive(directive)
        where = f'{guide}:{line}'
        if d['not_run']:
            not_run.append(f'{where}: {d["not_run"]}')
            continue
        ports = free_ports(4)
        for k, p in enumerate(ports):
            env[f'PORT{k}'] = str(p)
        for x, y in d['replace']:
            y = re.sub(r'\$PORT(\d)', lambda m: str(ports[int(m.group(1))]), y)
            if x not in script:
                print(f'{where}: the directive replaces "{x}", which the block does not contain')
                status = 1
            script = script.replace(x, y)
        if d['parallel']:
            script = side_by_side(script)
        if d['cap']:
            script = re.sub(r'--epochs (\d+)',
                            lambda m: f'--epochs {min(int(m.group(1)), MAX_EPOCHS)}', script)
        print(f'--- {where}\n{script}', flush=True)
        t0 = time.time()
        try:
            r = subprocess.run(['bash', '-c', 'set -eo pipefail\n' + script], cwd=work, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=240)
            out, rc = r.stdout, r.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b'').decode(errors='replace') if isinstance(e.stdout, bytes) \
                else (e.stdout or ''), 124
        print(out[-6000:], end='' if out.endswith('\n') else '\n')
        print(f'--- exit {rc} after {time.time() - t0:.1f} s', flush=True)
        ran += 1
        if rc != 0:
            print(f'{where}: the block failed (exit {rc})')
            status = 1
            break
        for text in d['expect']:
            if text not in out:
                print(f'{where}: the output lacks "{text}"')
                status = 1
        if status:
            break
    print(f'{guide}: {ran} block(s) run in {time.time() - started:.0f} s'
          + (f', {len(not_run)} not run:' if not_run else ''))
    for n in not_run:
        print('  ' + n)
    if a.keep or status:
        print(f'scratch folder kept: {work}')
    else:
        shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == '__main__':
    sys.exit(main())
