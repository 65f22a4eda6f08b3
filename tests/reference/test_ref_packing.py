#!/usr/bin/python3
"""Checks of tokfeed_ref.py's packed rows, rank dealing and elastic resume.

docs/data_model.md sections 4.1 (rows, best-fit decreasing), 4.2 (ranks and
steps), 4.3 (elastic resume) and 5 (packed tensors), checked on the
reference itself: hand-worked packings, invariants over many synthetic
epochs, real sp32k batches, and the padded modes' output against the
reference as it was before packing existed (commit BASE_COMMIT).

    /usr/bin/python3 tests/reference/test_ref_packing.py

Exits 0 when every check passes, 1 otherwise (each failure is printed).
"""

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import tokfeed_ref as ref  # noqa: E402

SP32K = os.path.join(ROOT, "tests/data/tokenizers/sp32k/tokenizer.model")
SFT = os.path.join(ROOT, "tests/data/sft")
REF = os.path.join(HERE, "tokfeed_ref.py")
PY = "/usr/bin/python3"

# The last commit whose tokfeed_ref.py knew only the padded modes; their
# output must not have changed since.
BASE_COMMIT = "d19d228fe5d0e478f41b3ed5a61dfbf35dba13cf"  # the one label rule (docs/data_model.md 2.2): chatml/qwen train "\n", llama2 its whole turn


def cfg_of(**kw):
    """A config dict as load_config makes it, for the order functions only."""
    cfg = {"size": 2, "max_length": 10, "tokens": 10, "padding": "packed", "pack_window": 1000,
           "drop_last": False, "world_size": 1, "shuffle": True, "seed": 42, "truncation": "right"}
    cfg.update(kw)
    return cfg


# ---------------------------------------------------------------- 4.1: best-fit decreasing

def test_best_fit_hand_worked():
    # C = 10. Visit order by length desc, ties by window position:
    # s1(7) s4(6) s6(5) s2(4) s0(3) s3(3) s5(2) s7(1)
    #   s1 -> open A [1] free 3
    #   s4 -> A has 3 < 6: open B [4] free 4
    #   s6 -> A 3, B 4 < 5: open C [6] free 5
    #   s2 -> fits B (4) and C (5); least free B -> B [4, 2] free 0
    #   s0 -> fits A (3) and C (5); least free A -> A [1, 0] free 0
    #   s3 -> fits C (5) only -> C [6, 3] free 2
    #   s5 -> fits C (2) -> C [6, 3, 5] free 0
    #   s7 -> nothing fits (all free 0): open D [7]
    lengths = {0: 3, 1: 7, 2: 4, 3: 3, 4: 6, 5: 2, 6: 5, 7: 1}
    got = ref.pack_window([0, 1, 2, 3, 4, 5, 6, 7], lengths, 10)
    expect([[1, 0], [4, 2], [6, 3, 5], [7]], got, "hand-worked packing")


def test_best_fit_ties():
    # Window [40, 11, 23, 5] with lengths 6, 6, 2, 1 and C = 10.
    #   40 (6, window position 0 beats 11's position 1) -> A [40] free 4
    #   11 (6) -> A has 4: open B [11] free 4
    #   23 (2) -> A and B both free 4: the row opened first, A [40, 23] free 2
    #   5  (1) -> A 2, B 4: least free, A [40, 23, 5] free 1
    lengths = {40: 6, 11: 6, 23: 2, 5: 1}
    expect([[40, 23, 5], [11]], ref.pack_window([40, 11, 23, 5], lengths, 10), "ties")
    # An exact fit (free space 0 left) is a fit; a sample as long as C fills a row.
    lengths = {1: 4, 2: 6, 3: 10, 4: 6}
    #   3 (10) -> A [3] free 0; 2 (6) -> B [2] free 4; 4 (6) -> C [4] free 4;
    #   1 (4)  -> B and C free 4: B (opened first) -> B [2, 1] free 0
    expect([[3], [2, 1], [4]], ref.pack_window([1, 2, 3, 4], lengths, 10), "exact fits")


def test_windows():
    # window 3 over lengths 5 5 5 | 2 9 1 | 4, C = 10:
    #   window 1: 0 -> A [0] free 5; 1 -> A [0, 1] free 0; 2 -> B [2]
    #   window 2: 4 (9) -> C [4] free 1; 3 (2) -> D [3] free 8; 5 (1) -> C (1 < 8) [4, 5]
    #   window 3: [6]  (B [2] had room for 3 and 5, but windows are packed on their own)
    lengths = [5, 5, 5, 2, 9, 1, 4]
    got = ref.pack_rows(list(range(7)), lengths, 10, 3)
    expect([[0, 1], [2], [4, 5], [3], [6]], got, "windows")


def test_dropped_taken_out_first():
    # perm 4 0 3 1 2; samples 0 and 3 dropped (None). Remaining 4 1 2 in windows of 2:
    #   [4, 1]: 4 (6) -> A [4] free 4; 1 (5) -> B [1]   |   [2]: C [2]
    lengths = [None, 5, 3, None, 6]
    cfg = cfg_of(pack_window=2)
    rows, dropped = ref.epoch_rows([4, 0, 3, 1, 2], cfg, lengths)
    expect([[4], [1], [2]], rows, "rows after dropping")
    expect([0, 3], dropped, "dropped in perm order")
    # padding_free packs to batch.tokens, packed to max_length
    rows, _ = ref.epoch_rows([4, 0, 3, 1, 2], cfg_of(padding="padding_free", tokens=20, max_length=10), lengths)
    expect([[4, 1, 2]], rows, "padding_free capacity = tokens")
    # padded modes: one sample per row, perm itself (dropped samples included)
    rows, dropped = ref.epoch_rows([4, 0, 3], cfg_of(padding="longest"), None)
    expect(([[4], [0], [3]], []), (rows, dropped), "padded rows")


def naive_best_fit(window, lengths, capacity):
    """Spec 4.1 transcribed literally (linear scans), to cross-check pack_window."""
    order = sorted(range(len(window)), key=lambda i: (-lengths[window[i]], i))
    rows, used = [], []
    for i in order:
        s, l = window[i], lengths[window[i]]
        best = None
        for r in range(len(rows)):
            if capacity - used[r] >= l and (best is None or used[r] > used[best]):
                best = r
        if best is None:
            rows.append([])
            used.append(0)
            best = len(rows) - 1
        rows[best].append(s)
        used[best] += l
    return rows


def test_best_fit_random_vs_literal():
    rnd = random.Random(7)
    for trial in range(400):
        cap = rnd.choice([1, 4, 10, 37, 512])
        n = rnd.randrange(0, 60)
        window = rnd.sample(range(1000), n)
        lengths = {s: rnd.randint(1, cap) if rnd.random() < 0.8 else rnd.randint(1, max(1, cap // 8))
                   for s in window}
        got = ref.pack_window(window, lengths, cap)
        expect(naive_best_fit(window, lengths, cap), got, f"random packing {trial}")
        assert all(sum(lengths[s] for s in row) <= cap for row in got), "row over capacity"


# ---------------------------------------------------------------- 4.2: dealing

def synthetic_rows(n, cfg, epoch=0, seed=1):
    """Rows of an epoch of n records with random lengths (some dropped)."""
    rnd = random.Random(seed * 1000 + n)
    cap = cfg["max_length"] if cfg["padding"] == "packed" else cfg["tokens"]
    lengths = [None if rnd.random() < 0.1 else rnd.randint(1, min(cap, cfg["max_length"])) for _ in range(n)]
    rows, dropped = ref.epoch_rows(ref.permutation(n, epoch, cfg), cfg, lengths)
    return rows, dropped, lengths


def samples_of(rows):
    return sorted(s for row in rows for s in row)


def test_every_sample_once_every_rank_same_steps():
    for padding in ("packed", "padding_free"):
        for drop_last in (False, True):
            for world in (1, 2, 3, 4, 5):
                for size in (1, 2, 3):
                    for n in (0, 1, 2, 3, 4, 7, 13, 50, 101):
                        cfg = cfg_of(padding=padding, size=size, drop_last=drop_last, world_size=world,
                                     max_length=16, tokens=40, pack_window=9)
                        what = f"{padding} drop_last={drop_last} R={world} size={size} n={n}"
                        check_deal(cfg, n, what)


def check_deal(cfg, n, what):
    rows, dropped, _ = synthetic_rows(n, cfg)
    world, S = cfg["world_size"], ref.rows_per_step(cfg)
    steps = [ref.deal(rows, r, world, cfg) for r in range(world)]
    B = ref.step_count(len(rows), world, cfg)
    expect([B] * world, [len(s) for s in steps], f"{what}: equal step counts")
    got = samples_of([row for rank in steps for step in rank for row in step])
    if cfg["drop_last"]:
        expect(samples_of(rows[:B * world * S]), got, f"{what}: drop_last delivers whole blocks")
    else:
        kept = sorted(set(range(n)) - set(dropped))
        # every sample once, but for the one-sample rows that repeat the
        # segment's start when the tail has fewer samples than ranks
        repeats = max(0, world - len(samples_of(rows[(B - 1) * world * S:]))) if B else 0
        expect(kept, sorted(set(got)), f"{what}: every sample delivered")
        expect(len(kept) + repeats, len(got), f"{what}: every sample once, {repeats} repeated")
    for k in range(B):
        sizes = [len(steps[r][k]) for r in range(world)]
        assert max(sizes) <= S, f"{what}: step {k} sizes {sizes}"  # S = 1 with padding_free
        block = rows[k * world * S:(k + 1) * world * S]
        if k == B - 1 and not cfg["drop_last"]:
            block = ref.split_tail(rows[k * world * S:], world, rows)
            assert len(block) >= world, f"{what}: a rank without rows"
        # row p of the block to rank p mod R, in order
        expect([block[r::world] for r in range(world)], [steps[r][k] for r in range(world)],
               f"{what}: step {k} block")


def test_tail_split():
    cfg = cfg_of(size=1, world_size=4)
    # tail of 2 rows, 4 ranks: split [a,b,c] (most samples) -> [a,b],[d,e],[c];
    # then [a,b] and [d,e] tie at 2: the first, [a,b] -> [a],[d,e],[c],[b]
    expect([[1], [4, 5], [3], [2]], ref.split_tail([[1, 2, 3], [4, 5]], 4, [[1, 2, 3], [4, 5]]), "split")
    # fewer samples than ranks: split until every row has one sample, then
    # repeat the segment's samples from its start
    Q = [[7, 8], [9]]
    expect([[7], [9], [8], [7], [8]], ref.split_tail(Q, 5, Q), "split to singles, then wrap")
    got = [ref.deal_packed(Q, r, 5, cfg) for r in range(5)]
    expect([[[[7]]], [[[9]]], [[[8]]], [[[7]]], [[[8]]]], got, "no 0-row batch")
    # the wrap starts at the segment's start, not the tail's
    seg = [[1, 2], [3], [4]]
    expect([[4], [1], [2]], ref.split_tail([[4]], 3, seg), "wrap from the segment's start")
    # the tail is only split when it has fewer rows than ranks
    expect([[1, 2], [3, 4], [5]], ref.split_tail([[1, 2], [3, 4], [5]], 3, [[1, 2], [3, 4], [5]]), "no split")
    # the rows handed in are not changed
    expect([[7, 8], [9]], Q, "split works on a copy")


def test_padded_start_base():
    # Padded modes over Q = rows[b:]: DistributedSampler with N = n
    cfg = cfg_of(padding="longest", size=2, world_size=3)
    perm = ref.permutation(11, 0, cfg)
    rows, _ = ref.epoch_rows(perm, cfg)
    got = ref.deal(rows[4:], 1, 3, cfg)
    # Q = perm[4:], n = 7, total 9, idx = Q + Q[:2], rank 1 takes idx[1::3]
    Q = perm[4:]
    idx = Q + Q[:2]
    mine = [[s] for s in idx[1::3]]
    expect([mine[0:2], mine[2:3]], got, "padded segment")


# ---------------------------------------------------------------- 4.3: elastic resume

def delivered(cfg, world, rows_of, epochs, start=(0, 0, 0), until=None):
    """{epoch: [rows]} delivered by all ranks; until=(epoch, step): stop before it."""
    cfg = dict(cfg, world_size=world)
    out = {}
    for r in range(world):
        for epoch, step, rows in ref.plan(0, r, epochs, cfg, start, rows_of):
            if until is not None and (epoch, step) >= until:
                break
            out.setdefault(epoch, []).extend(rows)
    return out


def test_elastic_4_to_2():
    for padding in ("packed", "padding_free"):
        for drop_last in (False, True):
            cfg = cfg_of(padding=padding, size=2, drop_last=drop_last, max_length=16, tokens=40, pack_window=7)
            memo = {e: synthetic_rows(61, cfg, epoch=e)[0] for e in range(3)}
            rows_of = memo.__getitem__
            B4 = ref.step_count(len(memo[1]), 4, cfg)
            for epoch, step in [(0, 0), (0, 1), (0, 3), (1, B4 - 1), (1, B4), (0, B4 // 2)]:
                what = f"{padding} drop_last={drop_last} 4->2 at ({epoch}, {step})"
                before = delivered(cfg, 4, rows_of, 3, until=(epoch, step))
                start = ref.elastic_start((epoch, step, 4, 0), rows_of, cfg_of(**dict(cfg, world_size=2)))
                after = delivered(cfg, 2, rows_of, 3, start=start)
                e_resume = epoch + 1 if step == B4 else epoch
                for e in range(3):
                    rows = before.get(e, []) + after.get(e, []) if e == e_resume else \
                        (before.get(e, []) if e < e_resume else after.get(e, []))
                    full = memo[e]
                    if drop_last:
                        # leftovers of each segment are not delivered: at most once,
                        # and every row before the leftovers of the resumed segment
                        assert len(samples_of(rows)) == len(set(samples_of(rows))), f"{what}: twice"
                        assert set(samples_of(rows)) <= set(samples_of(full)), what
                    else:
                        # every row, once, but for the one-sample rows of a last
                        # step with fewer samples than ranks (fewer than R repeats)
                        expect(samples_of(full), sorted(set(samples_of(rows))), f"{what}: epoch {e} every row")
                        assert len(samples_of(rows)) - len(samples_of(full)) < 4, f"{what}: epoch {e} repeats"
                # the rows before the resume are the old stream's rows, row for row
                if step < B4:
                    expect(sorted(memo[epoch][:step * 4 * ref.rows_per_step(cfg)]),
                           sorted(before.get(epoch, [])), f"{what}: before = first k*R*S rows")


def test_elastic_chain_and_base():
    # 4 -> 2 -> 3 within one epoch: the second resume carries the base.
    cfg = cfg_of(padding="packed", size=2, max_length=16, pack_window=5)
    memo = {e: synthetic_rows(97, cfg, epoch=e)[0] for e in range(2)}
    rows_of = memo.__getitem__
    before = delivered(cfg, 4, rows_of, 2, until=(0, 2))                  # 16 rows
    s1 = ref.elastic_start((0, 2, 4, 0), rows_of, cfg_of(**dict(cfg, world_size=2)))
    expect((0, 16, 0), s1, "first resume")
    mid = delivered(cfg, 2, rows_of, 2, start=s1, until=(0, 3))          # 12 rows
    s2 = ref.elastic_start((0, 3, 2, 16), rows_of, cfg_of(**dict(cfg, world_size=3)))
    expect((0, 28, 0), s2, "second resume")
    after = delivered(cfg, 3, rows_of, 2, start=s2)
    rows = before[0] + mid[0] + after[0]
    expect(samples_of(memo[0]), samples_of(rows), "4->2->3 exactly once")
    expect(samples_of(memo[1]), samples_of(after[1]), "next epoch whole")


def test_elastic_same_world_repositions():
    # Same world size: the stream continues as if it had not stopped (A20),
    # in padded modes too (there a re-based segment would pad differently).
    for padding in ("longest", "packed", "padding_free"):
        cfg = cfg_of(padding=padding, size=3, world_size=4, max_length=16, tokens=30)
        n = 50
        if padding in ref.PACKED:
            memo = {e: synthetic_rows(n, cfg, epoch=e)[0] for e in range(2)}
        else:
            memo = {e: ref.epoch_rows(ref.permutation(n, e, cfg), cfg)[0] for e in range(2)}
        rows_of = memo.__getitem__
        B = ref.step_count(len(memo[0]), 4, cfg)
        for step in (0, 1, B - 1, B):
            start = ref.elastic_start((0, step, 4, 0), rows_of, cfg)
            for r in range(4):
                whole = [x for x in ref.plan(n, r, 2, cfg, (0, 0, 0), rows_of) if (x[0], x[1]) >= (0, step)]
                resumed = list(ref.plan(n, r, 2, cfg, start, rows_of))
                expect(whole, resumed, f"{padding} reposition at step {step} rank {r}")


def test_elastic_errors():
    cfg = cfg_of(padding="packed", world_size=2)
    rows = [[i] for i in range(10)]
    for pos in [(0, 4, 4, 0), (0, 0, 4, 11)]:   # B = ceil(10/8) = 2; base past the rows
        try:
            ref.elastic_start(pos, lambda e: rows, cfg)
        except ref.ToolError:
            continue
        raise AssertionError(f"{pos} accepted")
    expect((1, 0, 0), ref.elastic_start((0, 2, 4, 0), lambda e: rows, cfg), "step B -> next epoch")
    expect((0, 8, 0), ref.elastic_start((0, 1, 4, 0), lambda e: rows, cfg), "base + k*R*S")
    expect((0, 2, 0), ref.elastic_start((0, 2, 1, 0), lambda e: rows, dict(cfg, padding="padding_free")),
           "S = 1 with padding_free")


# ---------------------------------------------------------------- 5: tensors, real tokens

def write_job(d, name, dataset, batch, extra="", template="chatml", dataset_keys=""):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(f'[dataset]\npath = "{dataset}"\n{dataset_keys}'
                f'[tokenizer]\ntype = "sentencepiece"\npath = "{SP32K}"\ntemplate = "{template}"\n'
                f"[batch]\n{batch}\n{extra}")
    return path


def test_packed_tensors_real_tokens():
    with tempfile.TemporaryDirectory() as d:
        for padding, world, extra_batch in [("packed", 3, "size = 2"), ("padding_free", 2, "tokens = 900"),
                                            ("packed", 1, "size = 5")]:
            job = write_job(d, f"{padding}.toml", os.path.join(SFT, "mixed-300.jsonl"),
                            f'max_length = 384\npadding = "{padding}"\ntruncation = "left"\n'
                            f"pack_window = 40\n{extra_batch}",
                            f"[ranks]\nworld_size = {world}\n[cache]\nenabled = true\ndir = \"{d}\"\n")
            cfg = ref.load_config(job)
            convs, _ = ref.load_dataset(cfg, 120)
            tok = ref.make_tokenizer(cfg)
            samples = ref.Samples(convs, cfg, tok)
            rows_of, _ = ref.make_rows_of(samples, cfg, {"dropped": 0})
            seen = []
            for r in range(world):
                for epoch, step, rows in ref.plan(len(convs), r, 1, cfg, (0, 0, 0), rows_of):
                    batch = ref.build_packed_batch([[samples.get(i) for i in row] for row in rows], cfg, tok.pad_id)
                    check_packed_batch(batch, rows, samples, cfg, tok.pad_id, f"{padding} rank {r} step {step}")
                    seen += [i for row in rows for i in row]
            expect(list(range(len(convs))), sorted(seen), f"{padding}: every record once")


def check_packed_batch(batch, rows, samples, cfg, pad_id, what):
    free = cfg["padding"] == "padding_free"
    assert ("attention_mask" in batch) != free, f"{what}: attention_mask presence"
    ids, labels, pos = batch["input_ids"], batch["labels"], batch["position_ids"]
    mask = batch.get("attention_mask") or [[1] * len(x) for x in ids]
    L = {len(x) for x in ids}
    if not free:
        assert L <= {cfg["max_length"]}, f"{what}: L = {L}"
    # flattened real tokens; cu_seqlens are where position_ids restart at 0 on them
    flat_pos = [p for prow, mrow in zip(pos, mask) for p, m in zip(prow, mrow) if m == 1]
    cu = batch["cu_seqlens"]
    expect([i for i, p in enumerate(flat_pos) if p == 0], cu[:-1], f"{what}: cu_seqlens = position resets")
    expect(len(flat_pos), cu[-1], f"{what}: cu_seqlens total")
    lens = [b - a for a, b in zip(cu, cu[1:])]
    expect([max(lens, default=0)], batch["max_seqlen"], f"{what}: max_seqlen")
    for a, b in zip(cu, cu[1:]):
        expect(list(range(b - a)), flat_pos[a:b], f"{what}: positions 0..l-1")
    # each segment is its unpacked sample: ids equal, first label -100, the others equal
    flat_ids = [t for irow, mrow in zip(ids, mask) for t, m in zip(irow, mrow) if m == 1]
    flat_lab = [t for lrow, mrow in zip(labels, mask) for t, m in zip(lrow, mrow) if m == 1]
    members = [i for row in rows for i in row]
    expect(len(members), len(lens), f"{what}: one segment per sample")
    for (a, b), i in zip(zip(cu, cu[1:]), members):
        s_ids, s_labels = samples.get(i)
        expect(s_ids, flat_ids[a:b], f"{what}: sample {i} ids")
        expect(-100, flat_lab[a], f"{what}: sample {i} first label")
        expect(s_labels[1:], flat_lab[a + 1:b], f"{what}: sample {i} labels")
    # padding: pad id, label -100, position 0, mask 0
    for irow, lrow, prow, mrow in zip(ids, labels, pos, mask):
        n = sum(mrow)
        assert all(m == 0 for m in mrow[n:]) and all(m == 1 for m in mrow[:n]), f"{what}: mask"
        assert irow[n:] == [pad_id] * (len(irow) - n), f"{what}: pad ids"
        assert lrow[n:] == [-100] * (len(irow) - n) and prow[n:] == [0] * (len(irow) - n), f"{what}: pad"
    # transformers' varlen offsets: the position resets of the rows flattened
    # with their padding, each padding run one segment, ending at rows * L
    want, off = [], 0
    for prow, mrow in zip(pos, mask):
        n = sum(mrow)
        want += [off + i for i in range(n) if prow[i] == 0]
        want += [off + n] if n < len(prow) else []
        off += len(prow)
    expect(want + [off], batch["cu_seq_lens_q"], f"{what}: cu_seq_lens_q")
    hf = batch["cu_seq_lens_q"]
    expect([max((b - a for a, b in zip(hf, hf[1:])), default=0)], batch["max_length_q"], f"{what}: max_length_q")


def run_ref(args):
    p = subprocess.run([PY, REF] + args, capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"tokfeed_ref.py {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.stdout, p.stderr


def test_left_out_samples_padded():
    """4.1 in padded modes: a sample dropped as too long or without a trained
    token takes no row, so every batch but an epoch's last is full."""
    with tempfile.TemporaryDirectory() as d:
        for trunc, keep, drop_last in [("drop", False, False), ("right", False, False), ("right", True, False),
                                       ("drop", False, True)]:
            job = write_job(d, "j.toml", os.path.join(SFT, "mixed-300.jsonl"),
                            f'size = 3\nmax_length = 96\ntruncation = "{trunc}"\n'
                            f"keep_untrained = {'true' if keep else 'false'}",
                            f"[schedule]\nepochs = 2\ndrop_last = {'true' if drop_last else 'false'}\n"
                            "[ranks]\nworld_size = 2\n")
            cfg = ref.load_config(job)
            convs, _ = ref.load_dataset(cfg, 120)
            tok = ref.make_tokenizer(cfg)
            label = f"{trunc} keep_untrained={keep} drop_last={drop_last}"
            seen = {"dropped": 0, "untrained": 0, "all_masked": 0}
            for r in range(2):
                stats = {"dropped": 0, "untrained": 0, "all_masked": 0}
                batches = list(ref.stream(cfg, convs, tok, r, 2, stats))
                for i, (epoch, step, b) in enumerate(batches):
                    last = i + 1 == len(batches) or batches[i + 1][0] != epoch
                    rows = len(b["input_ids"])
                    assert rows == 3 or (last and 0 < rows < 3 and not drop_last), f"{label}: {epoch}/{step}: {rows}"
                    for lab in b["labels"]:
                        assert keep or any(x != ref.IGNORE for x in lab), f"{label}: untrained row"
                    assert all(len(x) <= 96 for x in b["input_ids"]), f"{label}: too long"
                for k in seen:
                    seen[k] = max(seen[k], stats[k])
            if trunc == "drop":
                assert seen["dropped"] > 0, f"{label}: the job should drop samples"
            elif keep:
                assert seen["all_masked"] > 0 and seen["untrained"] == 0, f"{label}: {seen}"
            else:
                assert seen["untrained"] > 0 and seen["all_masked"] == 0, f"{label}: {seen}"


def test_cli_packed_dump_and_elastic():
    with tempfile.TemporaryDirectory() as d:
        free = write_job(d, "free.toml", os.path.join(SFT, "messages-100.jsonl"),
                         'max_length = 300\npadding = "padding_free"\ntokens = 700\ntruncation = "drop"\n'
                         "pack_window = 30", "[ranks]\nworld_size = 4\nnode_rank = 1\nlocal_ranks = 2\n")
        out, err = run_ref(["--config", free, "--rank", "3", "--report", "--limit-records", "40"])
        lines = [json.loads(x) for x in out.splitlines()]
        assert lines, "no batches"
        expect(["epoch", "step", "input_ids", "labels", "position_ids", "cu_seqlens", "max_seqlen", "cu_seq_lens_q",
                "max_length_q"], list(lines[0]), "padding_free keys")
        assert all(len(x["input_ids"]) <= 1 for x in lines), "padding_free: S = 1"
        report = json.loads(err)
        # dropped samples of the epoch, counted once (A21), the same on every rank
        cfg = ref.load_config(free)
        convs, _ = ref.load_dataset(cfg, 40)
        samples = ref.Samples(convs, cfg, ref.make_tokenizer(cfg))
        expect(sum(t is None for t in map(samples.get, range(len(convs)))), report["dropped"], "dropped count")
        assert report["dropped"] > 0, "the test job should drop samples"

        packed = write_job(d, "packed.toml", os.path.join(SFT, "mixed-300.jsonl"),
                           'size = 2\nmax_length = 256\npadding = "packed"\npack_window = 25',
                           "[schedule]\nepochs = 2\n[ranks]\nworld_size = 2\n")
        head = ["--config", packed, "--limit-records", "60"]
        out, _ = run_ref(head + ["--rank", "0"])
        lines = [json.loads(x) for x in out.splitlines()]
        expect(["epoch", "step", "input_ids", "attention_mask", "labels", "position_ids", "cu_seqlens",
                "max_seqlen", "cu_seq_lens_q", "max_length_q"], list(lines[0]), "packed keys")
        # --elastic-from at the same world size = the tail of the whole stream
        whole = out.splitlines()
        e1 = [i for i, x in enumerate(lines) if x["epoch"] == 0 and x["step"] == 3][0]
        out, _ = run_ref(head + ["--rank", "0", "--elastic-from", "0,3,2,0"])
        expect(whole[e1:], out.splitlines(), "same-world reposition via the CLI")
        # from 4 ranks at step 1: start (0, 1*4*2) = --start-epoch 0 --start-base 8
        a, _ = run_ref(head + ["--rank", "1", "--elastic-from", "0,1,4,0"])
        b, _ = run_ref(head + ["--rank", "1", "--start-epoch", "0", "--start-base", "8"])
        expect(a, b, "--elastic-from = --start-base")
        first = json.loads(a.splitlines()[0])
        expect((0, 0), (first["epoch"], first["step"]), "a new segment starts at step 0")


def test_config_checks():
    with tempfile.TemporaryDirectory() as d:
        ds = os.path.join(SFT, "messages-100.jsonl")
        good = ref.load_config(write_job(d, "g.toml", ds, 'padding = "packed"'))
        expect((1000, 2048), (good["pack_window"], good["tokens"]), "defaults")
        for batch, extra in [('padding = "packedd"', ""), ('padding = "packed"\npack_window = 0', ""),
                             ('padding = "padding_free"\nmax_length = 64\ntokens = 63', ""),
                             ('padding = "packed"\npack_window = true', ""),
                             ("", "[cache]\nenabled = 1\n"), ("", "[cache]\ndir = 3\n"),
                             ("", "[ranks]\nnode_rank = -1\n"), ("", "[ranks]\nlocal_ranks = 0\n")]:
            try:
                ref.load_config(write_job(d, "b.toml", ds, batch, extra))
            except ref.ToolError:
                continue
            raise AssertionError(f"accepted: {batch!r} {extra!r}")


# ---------------------------------------------------------------- padded modes: unchanged

PADDED_JOBS = [
    # (name, template, dataset, [batch] lines, extra tables, argument sets)
    ("example", None, None, None, None,
     [["--count", "6"], ["--count", "3", "--rank", "0", "--epochs-override", "2"]]),
    ("llama2-maxlen-left", "llama2", "mixed-300.jsonl",
     'size = 3\nmax_length = 256\npadding = "max_length"\ntruncation = "left"',
     '[schedule]\nshuffle = false\n', [["--count", "5"]]),
    ("world3-2epochs", "chatml", "alpaca-100.jsonl", "size = 5\nmax_length = 512",
     '[schedule]\nepochs = 2\n[ranks]\nworld_size = 3\n',
     [["--rank", "2", "--limit-records", "40", "--report"]]),
    ("edge-masked", "mistral", "edge.jsonl", "size = 3\nmax_length = 24",
     "[ranks]\nworld_size = 2\n", [["--rank", "1", "--report"]]),
]


def base_reference(d):
    """tokfeed_ref.py at BASE_COMMIT, or None when the checkout has no such commit."""
    p = subprocess.run(["git", "-C", ROOT, "show", f"{BASE_COMMIT}:tests/reference/tokfeed_ref.py"],
                       capture_output=True)
    if p.returncode != 0:
        return None
    path = os.path.join(d, "tokfeed_ref_base.py")
    with open(path, "wb") as f:
        f.write(p.stdout)
    return path


def padded_runs(d):
    """Yield (label, argument list) for every padded job of PADDED_JOBS."""
    for name, template, dataset, batch, extra, arg_sets in PADDED_JOBS:
        if dataset is None:
            job = os.path.join(ROOT, "examples/job.toml")
        else:
            # Samples without a trained token were kept then (4.1 now leaves them out),
            # and bad records were left out at start (JSONL's check_rows default then).
            job = write_job(d, name + ".toml", os.path.join(SFT, dataset), batch + "\nkeep_untrained = true", extra,
                            template, 'check_rows = "start"\n')
        for args in arg_sets:
            yield f"{name} {' '.join(args)}", ["--config", job] + args


# sha256 of stdout + "\0" + stderr (ROOT shown as <root>) of BASE_COMMIT's tokfeed_ref.py for each run of
# padded_runs, in order: the comparison still means something where git history
# is not available.
PADDED_DIGESTS = [
    "bb37ade1f95f85521eeca1c63657da61f44d0fe20d038a2edf6a3ca7720800a4",
    "661a63e5407281138b3d99c679e551b7a83704e1534a3bdeaa0a652eef4af27a",
    "b14dd7ab5ed7343ba287755c151eba094ab3a282aa92e4e4ad7b0d49d940a50e",
    "8c19477bfcf5d4cad97ba4b35280435200b9fb48a6cc1bcd0534985f31cab3e3",
    "b647e46c0b31303fdfdd2815d020dc6d1b17cbc35c6d634809ee0ccada5ffed3",
]


def test_padded_modes_unchanged():
    with tempfile.TemporaryDirectory() as d:
        base = base_reference(d)
        digests = []
        for label, args in padded_runs(d):
            out, err = run_ref(args)
            if "--report" in args:  # "untrained" is new; nothing is left out with keep_untrained
                report = json.loads(err)
                expect(0, report.pop("untrained"), f"{label}: untrained")
                err = json.dumps(report, ensure_ascii=False) + "\n"
            # the new options at their defaults change nothing
            out0, err0 = run_ref(args + ["--start-epoch", "0", "--start-base", "0"])
            if "--report" in args:
                report = json.loads(err0)
                report.pop("untrained")
                err0 = json.dumps(report, ensure_ascii=False) + "\n"
            expect((out, err), (out0, err0), f"{label}: explicit start (0, 0)")
            assert out.count("\n") > 0, f"{label}: no batches"
            # bad-record messages name the dataset as written: an absolute path here
            stable = out + "\0" + err.replace(ROOT, "<root>")
            digests.append(hashlib.sha256(stable.encode()).hexdigest())
            if base is not None:
                p = subprocess.run([PY, base] + args, capture_output=True, text=True)
                expect((p.returncode, p.stdout, p.stderr), (0, out, err), f"{label}: vs {BASE_COMMIT[:7]}")
        expect(PADDED_DIGESTS, digests, "padded outputs vs recorded digests")


# ---------------------------------------------------------------- runner

def expect(want, got, what):
    if want != got:
        w, g = repr(want), repr(got)
        raise AssertionError(f"{what}:\n  expected {w[:600]}\n  got      {g[:600]}")


def main():
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    only = sys.argv[1:]
    failed = 0
    for name, fn in tests:
        if only and name not in only:
            continue
        try:
            fn()
            print(f"ok   {name}")
        except Exception:  # noqa: BLE001 - report every failure, then exit 1
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc(file=sys.stdout)
    print(f"{failed} failed" if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
