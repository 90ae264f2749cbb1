#!/usr/bin/env python3
"""Randomized BQBS campaign: `paper --strategy bqbs` runs drawn at random,
each compared line by line (sorted) with a fault-free `--strategy none` run
of the same seed, size and rate.

Each run draws, from its own seed (campaign seed * 1000 + run index):
  seed 1..10^6; records uniform in 50k..500k; rate: full (half the runs) or
  uniform 100k..400k records/s; standby set: flatmap, keyed, filter or
  flatmap,keyed; mode warm or hot; heartbeat uniform 1..20 ms; 0, 1 or 2
  faults, each panic, stall (5..60 ms) or cut, in one of the standby
  operators, at a record uniform over the input (distinct records; for
  `map`, `keyed` and `sink`, never a record the filter drops, `seq % 10 == 9`, so that every
  fault fires).

With --checkpoints, every run also takes checkpoints (interval uniform in
5..200 ms, the transactional sink), its buffer queues are 1, 2 or 16 MiB,
and its 0-3 faults may hit any operator:
a panic or cut in one without a standby (source, filter, map, keyed, sink)
is a restart-all from the last complete checkpoint, one in a backed-up
operator a takeover; each must be answered by one recovery record, and a
fault in an operator without a standby never by a takeover.

A run passes when it exits 0 with the clean output (no line lost, none
duplicated) within 10 x the clean run's time, and its report attributes
exactly one recovery to each injected panic, cut and stall of at least
twice the heartbeat + 5 ms (operator and record), and none to a stall no
longer than the heartbeat (no failure: the primary was not given up on). Prints
one line per run and a summary; exits 1 if any run failed.

    python3 bench/scripts/bqbs_campaign.py --runs 200 --seed 1 [--checkpoints] [--paper PATH] [--dir DIR] [--keep]

Its outputs (clean.jsonl, faulted.jsonl, report.json: ~100 MB at 500k
records) go to a fresh temp directory, removed when the campaign ends,
however it ends (also on Ctrl-C); with --dir DIR they go there and the
files are removed likewise. --keep keeps them for a look.
"""
import argparse, hashlib, json, os, random, shutil, subprocess, sys, tempfile, time

def sorted_md5(path):
    with open(path, 'rb') as f:
        lines = f.read().splitlines()
    lines.sort()
    h = hashlib.md5()
    for l in lines:
        h.update(l); h.update(b'\n')
    return h.hexdigest(), len(lines), len(lines) - len(set(lines))

def run(cmd, timeout):
    t = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout.decode(errors='replace'), time.monotonic() - t
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b'').decode(errors='replace'), time.monotonic() - t

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--runs', type=int, default=200)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--paper', default='target/release/paper')
    ap.add_argument('--dir', default=None, help='scratch directory (default: a temp dir)')
    ap.add_argument('--checkpoints', action='store_true',
                    help='checkpoints beside the standbys; faults in any operator')
    ap.add_argument('--keep', action='store_true',
                    help='keep the outputs and report of the last runs (default: removed at the end)')
    a = ap.parse_args()
    if a.dir:
        os.makedirs(a.dir, exist_ok=True)
        d = a.dir
    else:
        d = tempfile.mkdtemp(prefix='bqbs-campaign-')
    try:
        return campaign(a, d)
    finally:
        if a.keep:
            print(f'kept {d}', file=sys.stderr)
        elif a.dir:
            for f in ('clean.jsonl', 'faulted.jsonl', 'report.json'):
                try:
                    os.remove(os.path.join(d, f))
                except FileNotFoundError:
                    pass
        else:
            shutil.rmtree(d, ignore_errors=True)

def campaign(a, d):
    env = dict(os.environ); env.pop('RUST_BACKTRACE', None)
    clean = {}
    failed = 0
    takeovers = 0
    unprovoked = 0
    for i in range(a.runs):
        r = random.Random(a.seed * 1000 + i)
        seed = r.randint(1, 10**6)
        records = r.randint(50_000, 500_000)
        rate = 0 if r.random() < 0.5 else r.randint(100_000, 400_000)
        standby = r.choice(['flatmap', 'keyed', 'filter', 'flatmap,keyed'])
        mode = r.choice(['warm', 'hot'])
        hb = r.randint(1, 20)
        faults = []
        injected = []
        interval = r.randint(5, 200) if a.checkpoints else None
        queue_mib = r.choice([1, 2, 16]) if a.checkpoints else None
        backed = standby.split(',')
        targets = ['source', 'flatmap', 'filter', 'map', 'keyed', 'sink'] if a.checkpoints else backed
        for _ in range(r.choice([0, 1, 2, 3] if a.checkpoints else [0, 1, 2])):
            op = r.choice(targets)
            kind = r.choice(['panic', 'stall', 'cut'] if op in backed else ['panic', 'cut'])
            at = r.randint(0, records - 1)
            if op in ('map', 'keyed', 'sink') and at % 10 == 9:
                at -= 1
            if at in [f[1] for f in injected]:
                continue
            ms = r.randint(5, 60) if kind == 'stall' else 0
            injected.append((op, at, kind, ms))
            faults += ['--fault', f'{kind}@{op}:{at}' + (f':{ms}' if kind == 'stall' else '')]
        key = (seed, records, rate)
        if key not in clean:
            out = os.path.join(d, 'clean.jsonl')
            rc, log, secs = run([a.paper, '--records', str(records), '--seed', str(seed),
                                 '--rate', str(rate), '--output', out], 600)
            if rc != 0:
                print(f'clean run failed: {log[-500:]}'); return 2
            clean[key] = (sorted_md5(out), secs)
        (want, lines, _), clean_secs = clean[key]
        out = os.path.join(d, 'faulted.jsonl')
        rep = os.path.join(d, 'report.json')
        for f in (out, rep):
            if os.path.exists(f):
                os.remove(f)
        cmd = [a.paper, '--strategy', 'bqbs', '--records', str(records), '--seed', str(seed),
               '--rate', str(rate), '--standby', standby, '--standby-mode', mode,
               '--standby-heartbeat-ms', str(hb), '--output', out, '--report', rep] + faults
        if interval is not None:
            cmd += ['--checkpoint-interval-ms', str(interval), '--standby-queue-mib', str(queue_mib)]
        limit = max(10 * clean_secs, 5.0)
        rc, log, secs = run(cmd, limit)
        verdict = 'ok'
        verdict_t = ''
        if rc is None:
            verdict = f'HUNG (> {limit:.1f} s)'
        elif rc != 0:
            verdict = f'exit {rc}: ' + ' '.join(l.strip() for l in log.splitlines() if 'Caused' in l or 'operator' in l)[:300]
        else:
            got, n, dups = sorted_md5(out)
            if got != want:
                verdict = f'WRONG: {n} lines vs {lines}, {dups} duplicated'
            else:
                recs = json.load(open(rep))['recovery']
                for op, at, kind, ms in injected:
                    mine = [x for x in recs if x['operator'] == op and x['tuple_id'] == at]
                    k = len(mine)
                    if op not in backed and any(x['kind'] != 'restart-all' for x in mine):
                        verdict = f'KIND: a takeover for the fault at {op}:{at} (no standby)'
                        continue
                    # A stall shorter than the heartbeat is no failure (no
                    # record); one well past it is (one record); near it,
                    # either.
                    want = {1} if kind != 'stall' or ms >= 2 * hb + 5 else {0} if ms <= hb else {0, 1}
                    if k not in want:
                        verdict = f'ATTRIBUTION: {k} records for the fault at {op}:{at}'
        for l in log.splitlines():
            if ' takeovers (' in l:
                w = l.split(' takeovers (')
                t, u = int(w[0].split()[-1]), int(w[1].split()[0])
                takeovers += t; unprovoked += u
                verdict_t = f'{t} takeovers ({u} unprovoked)'
        if verdict != 'ok':
            failed += 1
        shown = [c for c in cmd[1:] if c not in ('--output', out, '--report', rep)]
        print(f'{i:4d} {verdict:6s} {secs:6.2f}s (clean {clean_secs:5.2f}s) {verdict_t:28s} ' + ' '.join(shown), flush=True)
        for l in log.splitlines():
            if 'unprovoked:' in l:
                print('       ' + l.strip(), flush=True)
    print(f'{a.runs} runs: {a.runs - failed} exact, {failed} failed; {takeovers} takeovers, {unprovoked} unprovoked')
    return 1 if failed else 0

if __name__ == '__main__':
    sys.exit(main())
