"""Section 7 of docs/data_model.md (evaluation data) for the reference.

Written from the page alone, like tokfeed_ref.py, which imports it: the
[eval] table, the held-out records, the evaluation set, a pass's dealing
over ranks, and the evaluation stream of repeated passes.

Readings chosen where the page is ambiguous:
 E1 [eval] keys are type-checked here as the daemon documents them
    (split_ratio a number in [0, 1), batch_size/tokens/workers integers
    >= 1); [[eval.datasets]] entries take [[datasets]]' keys, and `weight`
    is an error (exit 2, like section 1.1's errors).
 E2 --split eval without [eval] is an error (exit 2).
 E3 The dump's "epoch" of an evaluation batch is its pass, "step" its
    batch within the pass (A11 for passes).
 E4 "dropped" and "untrained" in --report count a pass's left-out samples
    once per printed pass, on every rank (A21 for passes), whether or not
    the rank has a batch in it.
"""
import math

import tokfeed_ref as ref

HOLD_XOR = 0xE7037ED1A0B428DB   # section 7: the held-out draw's seed term


def load_eval_config(raw, base, cfg):
    """[eval] and [[eval.datasets]] -> cfg["eval"] (None without [eval]) and
    cfg["eval_datasets"] (E1). Needs cfg's [batch] values (the defaults)."""
    ev = raw.get("eval")
    cfg["eval"], cfg["eval_datasets"] = None, []
    if ev is None:
        return
    if not isinstance(ev, dict):
        raise ref.ToolError("config: [eval] must be a table")
    ratio = ev.get("split_ratio", 0)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
        raise ref.ToolError(f"config: [eval] split_ratio = {ratio!r}, expected a number in [0, 1)")
    out = {
        "split_ratio": float(ratio),
        "batch_size": ref._int(ev, "eval", "batch_size", cfg["size"], 1),
        "tokens": ref._int(ev, "eval", "tokens", cfg["tokens"], 1),
        "workers": ref._int(ev, "eval", "workers", 1, 1),
    }
    many = ev.get("datasets")
    if many is not None:
        if not isinstance(many, list) or not many:
            raise ref.ToolError("config: eval.datasets must be a non-empty array of tables", 2)
        for i, t in enumerate(many):
            if isinstance(t, dict) and "weight" in t:
                raise ref.ToolError(f"config: [eval.datasets.{i}] weight: an evaluation set is not mixed", 2)
            cfg["eval_datasets"].append(ref._dataset_entry(t, f"eval.datasets.{i}", base))
    if out["split_ratio"] > 0 or cfg["eval_datasets"]:
        cfg["eval"] = out


def held_out(seed, d, n, ratio):
    """Section 7: the held-out records of training dataset d (0..n-1, ascending)."""
    if not ratio > 0 or n == 0:
        return []
    h = min(n, max(1, math.floor(n * ratio)))
    state = (seed & ref.MASK64) ^ HOLD_XOR ^ (((d + 1) * ref.DRAW_MUL) & ref.MASK64)
    return sorted(ref.shuffled(n, state)[:h])


def splits(corpus, cfg):
    """-> (the training Mix, the evaluation set V as valid-record numbers).

    Each training dataset loses its held-out records before section 1.1's
    counts and draws; V is the held-out records, dataset by dataset, then
    each evaluation dataset's records (or its `samples` by the Draw, epoch 0).
    """
    train = cfg["datasets"]
    ratio = cfg["eval"]["split_ratio"] if cfg["eval"] else 0.0
    infos = corpus.datasets
    kept_ids, held_ids = [], []
    for d, info in enumerate(infos[:len(train)]):
        o, n = info["offset"], info["valid"]
        held = held_out(cfg["seed"], d, n, ratio)
        if held and len(held) >= n:
            raise ref.ToolError(f"split_ratio holds out all {n} records of dataset {d}", 2)
        hs = set(held)
        kept_ids.append([o + i for i in range(n) if i not in hs])
        held_ids.append([o + i for i in held])
    mix = ref.Mix([len(k) for k in kept_ids], train, ids=kept_ids)
    V = [i for h in held_ids for i in h]
    for k, ds in enumerate(cfg["eval_datasets"]):
        d = len(train) + k
        info = infos[d]
        part = ref.Mix([info["valid"]], [ds], ids=[list(range(info["offset"], info["offset"] + info["valid"]))])
        V += part.draw(0, 0, cfg["seed"], seed_index=d)
    return mix, V


def eval_cfg(cfg):
    """The batch settings of a pass: [eval]'s size and tokens, no shuffle."""
    ev = cfg["eval"]
    return dict(cfg, size=ev["batch_size"], tokens=ev["tokens"], shuffle=False, drop_last=False)


def deal_pass(Q, rank, world, cfg):
    """Section 7: this rank's batches of one pass over the rows Q."""
    S = ref.rows_per_step(cfg)
    n, step = len(Q), world * S
    if n == 0:
        return []
    B = -(-n // step)
    batches = [Q[k * step + rank * S:k * step + (rank + 1) * S] for k in range(B - 1)]
    t = n - (B - 1) * step
    last = Q[(B - 1) * step + rank * t // world:(B - 1) * step + (rank + 1) * t // world]
    if last:
        batches.append(last)
    return batches


def eval_stream(cfg, convs, tok, rank, passes, stats, V):
    """Yield (pass, step, batch) for `passes` passes of rank's evaluation stream.

    A pass leaves out what an epoch does (section 7, by 4.1): samples longer
    than max_length under truncation = "drop", and samples with no trained
    token unless keep_untrained; counted once per pass (E4).
    """
    ecfg = eval_cfg(cfg)
    samples = ref.Samples(convs, ecfg, tok)
    late = any(isinstance(convs[s], ref.LateBad) for s in V)   # left out by 4.1 (A41)
    facts = ecfg["padding"] in ref.PACKED or ref.leaves_samples_out(ecfg) or late
    lengths = ref._Lengths(samples) if facts else None
    untrained = ref._Untrained(samples) if facts else None
    rows, gone = ref.epoch_rows(list(V), ecfg, lengths, untrained)
    batches = deal_pass(rows, rank, ecfg["world_size"], ecfg)
    for p in range(passes):
        for s in gone:
            if not isinstance(convs[s], ref.LateBad):
                stats["dropped" if samples.get(s) is None else "untrained"] += 1
        for step, batch_rows in enumerate(batches):
            yield p, step, ref.make_batch(batch_rows, samples, ecfg, tok, stats)
