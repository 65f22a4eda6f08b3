#!/usr/bin/python3
"""Independent Python reference of tokfeed's batch stream.

Written from docs/data_model.md only (the contract); the C++ daemon is written
separately from the same page and the tests compare the two byte for byte.
Run with Debian's /usr/bin/python3 (3.11: tomllib, python3-sentencepiece).

    tokfeed_ref.py --config job.toml [--rank R] [--count N]
                   [--epochs-override E] [--limit-records N] [--report]
                   [--start-epoch E --start-base B | --elastic-from E,K,R,B]
    tokfeed_ref.py --config job.toml --bad-records

Exit codes: 0 ok, 2 bad record with on_bad_record = "fail" or an error of
section 1.1 (the [dataset] / [[datasets]] tables, samples / weight, columns,
a path with no shard, a corrupt compressed shard; A29), 3 tokenizer type not
available (hf without the `tokenizers` package) or no zstd(1) for a .zst
shard, 1 other errors.

Readings chosen where docs/data_model.md is ambiguous (to be settled in the
spec; each is marked "AMBIGUITY" where it is implemented):

 A1 Record checks are applied per category in the order the spec lists them
    (JSON/object -> format/fields -> unknown role -> empty turn -> no
    assistant -> system first -> alternation); within a category the first
    offending message wins. Field errors are found while parsing, in field
    order.
 A2 Reason texts the spec does not spell out: "no format matches",
    "field 'X': missing", "field 'X': expected a string",
    "field 'X': expected an array", "field 'X': expected an object",
    "field 'history[i]': expected a [query, response] pair",
    "malformed JSON: not an object", "malformed JSON: <python message>".
 A3 A present, non-null optional field that is not a string (alpaca
    `input`/`system`, query_response `system`) is a bad record
    ("field 'input': expected a string"); `history` must be an array of
    2-element arrays of strings.
 A4 Format detection (auto) tests key presence, whatever the value
    ({"messages": null} is a messages record with a bad field).
 A5 (settled: the spec now says a NON-empty system message for mistral and
    llama2; the code follows it.) An empty-string system ("system": "" or a system message with "") is a
    system message (only null counts as absent), so the default system is
    NOT used, and mistral/llama2 render no system text. Empty system content is not
    a bad record (only user/assistant turns are checked).
 A6 (settled: the spec applies placeholders before the checks.) "Empty"
    means the empty string, checked on the conversation after
    placeholders and before llama2's strip(); whitespace-only content is
    not a bad record (under llama2 it renders as empty).
 A7 Placeholders are substituted in one simultaneous pass (a value that
    contains {{OTHER}} is not substituted again), only in record content,
    not in tokenizer.default_system.
 A8 mistral/llama2: a conversation ending in an unpaired user turn (u,a,u)
    alternates, so it is valid; the trailing user renders as
    "[INST] {user} [/INST]" (mistral) / "<s>[INST] {user} [/INST]" (llama2),
    like the HF chat templates, untrained.
 A9 (settled by the one label rule, data_model.md 2.2:) llama2 trains the
    turn's whole " {assistant} </s>", spaces included; chatml, qwen2_5 and
    qwen3 train through the "\n" after <|im_end|>, as ms-swift does.
 A10 Token byte ranges from SentencePiece are the ones SentencePiece
    reports (python gives code-point offsets; converted to UTF-8 bytes).
    Byte-fallback pieces of one character: all but the last get the empty
    range at the character's start, the last gets the whole character.
    The dummy-prefix "▁" piece gets the empty range at its text piece's
    start.
 A11 "step" in the dump is k, the batch index within its epoch (not the
    stream index e*B + k).
 A12 (settled by 4.1: samples left out take no row, in every mode.) A
    padded batch has rows = 0 only when a plan without sample facts meets a
    dropped sample, which 4.1 rules out; the code keeps the old handling.
 A13 "all_masked" in --report counts kept samples (keep_untrained = true)
    with no trained token per sample occurrence in the emitted stream of
    this rank (all epochs, up to --count), including DistributedSampler
    padding duplicates. "dropped" and "untrained" count what 4.1 leaves out:
    see A21.
 A14 JSONL lines are split on b"\\n" only; a line is blank when it holds only
    JSON whitespace (space, tab, CR). A line that is not UTF-8, or whose
    JSON has NaN/Infinity, is malformed. Duplicate keys: last one wins
    (Python json). A string with a lone surrogate escape is malformed.
 A15 JSON array file: a syntax error inside the array makes one bad record
    at the line where the error is, and parsing stops there (earlier
    records stay valid). Anything after the closing ']' is ignored.
 A16 The `file` in "file:line: reason" is dataset.path as written in the
    config (for a file; globs and directories: A31).
 A17 padding = "max_length" with rows = 0 gives [] (shape [0, M]).
 A18 tokenizer.type = "hf": the special strings are whatever the HF
    `tokenizers` library splits out (its added tokens); the pad id is
    tokenizer_config.json's pad_token when present, else 0. (Untested here:
    `tokenizers` is not installed for /usr/bin/python3, so this exits 3.)
 A19 --limit-records N keeps the first N physical lines of a JSONL file
    (blank lines count) or the first N elements of a JSON array; with
    several shards, of each shard (A35).
 A20 "step" in the dump counts the batches of a segment (4.2): a stream
    started at (e0, s0) prints step 0 for rows[s0:]'s first step. With
    --elastic-from at the config's own world size the stream is
    repositioned in the old segment (same base), so the first step printed
    is the position's step; at another world size it is a new segment
    (base b + step*R*S) from step 0. A position whose step is the segment's
    B goes to (epoch + 1, 0) at either world size; step > B or a base past
    the epoch's rows is an error.
 A21 Every mode: "dropped" (truncation = "drop") and "untrained" (no
    trained token, keep_untrained = false) in --report count an epoch's
    samples taken out by 4.1 once, for the whole epoch (also for e0 with
    s0 > 0), on every rank that prints a batch of that epoch: they belong
    to no row, so to no rank. A sample both too long and untrained counts
    as dropped (a dropped sample has no tokens to judge).
 A22 "all_masked" is judged on a sample's labels after truncation (spec 3),
    before packing sets its first label to -100; counted per sample in the
    printed batches of this rank.
 A23 batch.tokens defaults to batch.max_length in every mode (also with
    padding_free, where a value below max_length is an error); it is only
    read with padding_free. batch.pack_window must be >= 1 (default 1000).
 A24 S = 1 with padding_free everywhere S appears: the dealing (4.2) and
    the elastic start b + step*R*S (4.3); batch.size is then unused.
 A25 Packed modes with 0 rows (a rank left without rows by the tail split):
    every 2-D tensor is [], cu_seqlens [0], max_seqlen [0], cu_seq_lens_q
    [0], max_length_q [0]. A packed
    (not padding_free) row is always max_length long, the tail included.
 A26 The tail split (4.2) works on a copy: the rows of the epoch (and so an
    elastic start computed from them) are the unsplit rows.
 A27 [ranks] node_rank (>= 0, default 0) and local_ranks (>= 1, default
    world_size) are type-checked only: which ranks a daemon serves does not
    change any rank's stream, and --rank may be any rank < world_size.
 A28 [cache] enabled (bool) / dir (string) are type-checked and ignored,
    also enabled = false with packed modes (spec 6: batches are identical).
    Unknown keys and sections are ignored here (the reference reads only
    what it needs; the daemon is the one that rejects them).
 A29 Datasets (1.1): `[dataset]` and `[[datasets]]` together are an error;
    `datasets` must be a non-empty array of tables; with neither, one
    dataset with every default. Each entry takes the keys and defaults of
    [dataset] (path "data.jsonl", format "auto", on_bad_record "skip", no
    placeholders, no columns). samples: a TOML integer (not a boolean)
    >= 1; weight: a TOML integer or float (not a boolean), finite, > 0.
    The 1.1 errors exit 2 (see Exit codes); a bad format / on_bad_record /
    placeholders value still exits 1 like the other config errors.
 A30 Shards: a path holding `*`, `?` or `[` is a glob even when a file of
    that name exists, matched by Python's glob.glob (fnmatch: `*`, `?`,
    `[...]`, `[!...]`; `**` is a plain `*`; a name starting with "." is
    only matched by a pattern part starting with "."), keeping matches that
    are regular files after following symlinks. A directory is walked with
    os.walk: hidden files and directories included, symlinks to files
    included, symlinked directories not entered; the suffixes are tested on
    the file name, case-sensitively. Any other path is one shard, read as
    it is (any name); a path that does not exist is an error.
 A31 A shard's name (the `shard` of "shard:line: reason", and what is
    sorted) is built from dataset.path as written: a file: the path itself
    (A16); a glob: the match as glob.glob(path, root_dir=config directory)
    returns it (relative when the pattern is); a directory:
    os.path.join(path, the file's path below it). Sorted bytewise on their
    UTF-8 bytes (os.fsencode), which is the order of the resolved paths too
    (they share one prefix).
 A32 Compression is chosen by the shard's name: ending in ".gz" (any name,
    not only .jsonl.gz) is gzip, ".zst" is zstd. gzip: Python's gzip
    module; zero bytes after a member are skipped (as gzip(1) and Python
    do), any other bytes must start another member. zstd: the frames are
    walked (RFC 8878: frame and skippable-frame magics, header, block
    headers, checksum), so a non-zstd file named .zst (zstd(1) would also
    decode gzip/xz/lz4) or zero padding is corrupt; then `zstd -dcq`
    decodes it, with zstd(1)'s default memory limit. An empty (0-byte)
    compressed shard is an error (gzip(1) and zstd(1) both say "unexpected
    end of file").
 A33 The compressed byte offset of a corrupt shard is where decoding
    stopped: the end of the file when it ends early (header, deflate data,
    block or trailer cut off); the start of a member / frame whose magic or
    method is wrong; the frame header byte with the reserved bit; the block
    header with the reserved type; for bad deflate data the byte whose
    arrival made zlib fail; for a gzip CRC / length mismatch the trailer
    field; for a zstd frame whose structure is sound but which zstd(1)
    rejects (bad content, checksum), the start of that frame.
 A34 columns: a table of strings to strings, applied to object records
    (before `format`, explicit or auto), all at once: {a = "b", b = "c"}
    turns {a, b} into {b: a's value, c: b's value}. A source is removed
    under its own name whether or not it is null. When several sources
    name one target, the first in the table's order that is present and
    not null wins. source = target is allowed (it only drops a null).
 A35 --limit-records N applies to each shard (its first N lines or
    elements), so the daemon is to be given shards cut the same way.
 A36 on_bad_record is per dataset: the job fails (exit 2, the message of
    the first such record in reading order on stderr) when a dataset with
    "fail" has a bad record; bad records of "skip" datasets are skipped.
    --bad-records and --report's "bad_records" list every dataset's, in
    reading order (dataset, shard, line).
 A37 The draw (1.1) uses its splitmix64 whatever schedule.shuffle says
    (shuffle only governs section 4's permutation of L); m = 0 draws
    nothing. Wt is summed in config order, left to right, in doubles, and
    F / (1 - Wt) converts F to a double. A dataset with n_d = 0 that has to
    give c_d > 0 samples (samples = k, or a weighted share above 0) is an
    error (exit 2); with neither samples nor weight it gives none.
 A38 A record that appears several times in an epoch's order is the same
    sample (tokenized once, same tokens); each occurrence is a sample of its
    own for packing, dealing and the dropped / all_masked counts (A13, A21).
    Only records that occur in some epoch's order are tokenized.
 A40 qwen2_5's and qwen3's tool records (spec 2): the reference reads section 1.2 for
    records in the HF `messages` form, ms-swift's `tool_call` /
    `tool_response` roles included (a tool call's content a JSON object or a
    JSON string of one); ShareGPT's `function_call` / `observation` are not
    read here (such records stay section 1's bad records). A tool record is
    checked by rendering it: a template error (e.g. a None content) makes it
    bad with the Python error as its reason.
 A39 --report adds "datasets" (after the other keys) only for a config with
    `[[datasets]]`, so a [dataset] job's report is unchanged: per dataset
    {"path": as written, "shards": how many, "records": records read (valid
    + bad; blank lines are not records), "valid": n_d, "bad": count,
    "samples_per_epoch": c_d}.
 A41 check_rows (1.1): unset, a JSONL dataset with on_bad_record = "skip"
    is checked when read; "start" checks at start; "when_read" with "fail"
    is a config error. Checked when read, every record read (section 1's
    bad ones too) is a valid record of the plan (n_d counts it); a bad one
    is left out of every epoch by 4.1 as a dropped sample is (so its
    dataset's plan needs the facts, whatever truncation and
    keep_untrained say), counted apart (--report's "bad_when_read", given
    when a dataset is checked when read), not among "bad_records"; --bad-records lists it as `tokfeedd
    --check-config` does. The reference judges it as it reads the shard:
    when it is judged does not change the batches.
"""

import argparse
import bisect
import glob
import gzip
import itertools
import json
import math
import os
import re
import struct
import subprocess
import sys
import tomllib
import zlib

# Run as a script, this module is __main__; tokfeed_ref_eval imports it by
# name, and must get this very module (one LateBad class, one Samples), not
# a second copy.
if __name__ == "__main__":
    sys.modules.setdefault("tokfeed_ref", sys.modules[__name__])

IGNORE = -100
MASK64 = 0xFFFFFFFFFFFFFFFF
GOLDEN = 0x9E3779B97F4A7C15
DRAW_MUL = 0xD1B54A32D192ED03   # spec 1.1: the draw's per-dataset seed term

FORMATS = ("auto", "messages", "sharegpt", "alpaca", "query_response", "prompt_completion", "text")
ON_BAD = ("skip", "fail")
# Spec 1.1: the files a directory path takes (tested on the file name).
SHARD_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
GLOB_CHARS = "*?["

DEFAULT_SYSTEM = {
    "mistral": None,
    "llama2": None,
    "chatml": "You are a helpful assistant.",
    "qwen2_5": "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    "qwen3": None,
    "llama3": None,
}

PADDINGS = ("longest", "max_length", "packed", "padding_free")
PACKED = ("packed", "padding_free")


class BadRecord(Exception):
    """A record rejected by spec section 1 "Bad records"; str() is the reason."""


class ToolError(Exception):
    def __init__(self, msg, code=1):
        super().__init__(msg)
        self.code = code


# ---------------------------------------------------------------- config

def _int(table, section, key, default, lo):
    """An integer config value >= lo (TOML booleans are not integers)."""
    v = table.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ToolError(f"config: [{section}] {key} = {v!r}, expected an integer")
    if v < lo:
        raise ToolError(f"config: [{section}] {key} = {v}, expected an integer >= {lo}")
    return v


def _typed(table, section, key, default, kind, what):
    v = table.get(key, default)
    if not isinstance(v, kind):
        raise ToolError(f"config: [{section}] {key} = {v!r}, expected {what}")
    return v


def _dataset_entry(table, where, base):
    """One dataset of [dataset] / [[datasets]] (spec 1, 1.1) -> dict (AMBIGUITY A29)."""
    if not isinstance(table, dict):
        raise ToolError(f"config: {where} must be a table", 2)
    path = table.get("path", "data.jsonl")
    if not isinstance(path, str) or not path:
        raise ToolError(f"config: [{where}] path = {path!r}, expected a non-empty string", 2)
    ds = {
        "path": path,                 # as written: shard names are built from it (A31)
        "base": base,                 # the config file's directory
        "format": table.get("format", "auto"),
        "on_bad_record": table.get("on_bad_record", "skip"),
        "check_rows": table.get("check_rows"),
        "placeholders": table.get("placeholders", {}),
        "columns": table.get("columns", {}),
        "samples": table.get("samples"),
        "weight": table.get("weight"),
    }
    for key, allowed in (("format", FORMATS), ("on_bad_record", ON_BAD)):
        if ds[key] not in allowed:
            raise ToolError(f"config: [{where}] {key} = {ds[key]!r}, expected one of {allowed}")
    if ds["check_rows"] not in (None, "start", "when_read"):
        raise ToolError(f"config: [{where}] check_rows = {ds['check_rows']!r}, expected 'start' or 'when_read'")
    if ds["check_rows"] == "when_read" and ds["on_bad_record"] == "fail":
        raise ToolError(f"config: [{where}] check_rows = 'when_read' with on_bad_record = 'fail'")
    # Spec 1.1: a JSONL shard's records are checked when read unless
    # check_rows = "start" or on_bad_record = "fail" (AMBIGUITY A41).
    ds["when_read"] = ds["on_bad_record"] == "skip" and ds["check_rows"] != "start"
    if not isinstance(ds["placeholders"], dict):
        raise ToolError(f"config: [{where}] placeholders = {ds['placeholders']!r}, expected a table")
    ds["placeholders"] = dict(ds["placeholders"])
    cols = ds["columns"]
    if not isinstance(cols, dict) or not all(isinstance(v, str) for v in cols.values()):
        raise ToolError(f"config: [{where}] columns = {cols!r}, expected a table of "
                        "source = \"target\" strings", 2)
    ds["columns"] = dict(cols)
    samples, weight = ds["samples"], ds["weight"]
    if samples is not None and weight is not None:
        raise ToolError(f"config: [{where}] has both samples and weight: give at most one", 2)
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
        raise ToolError(f"config: [{where}] samples = {samples!r}, expected an integer >= 1", 2)
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                               or not math.isfinite(weight) or not weight > 0):
        raise ToolError(f"config: [{where}] weight = {weight!r}, expected a number > 0", 2)
    return ds


def load_datasets_config(raw, base):
    """Spec 1.1: `[dataset]` (one) or `[[datasets]]` (a list), never both (AMBIGUITY A29)."""
    one, many = raw.get("dataset"), raw.get("datasets")
    if one is not None and many is not None:
        raise ToolError("config: both [dataset] and [[datasets]]: a job has one form or the other", 2)
    if many is None:
        datasets = [_dataset_entry(one if one is not None else {}, "dataset", base)]
    else:
        if not isinstance(many, list) or not many:
            raise ToolError("config: datasets must be a non-empty array of tables ([[datasets]])", 2)
        datasets = [_dataset_entry(t, f"datasets.{d}", base) for d, t in enumerate(many)]
    weights = [ds["weight"] for ds in datasets if ds["weight"] is not None]
    if weights and len(weights) < len(datasets):
        wt = 0.0
        for w in weights:   # config order, doubles (AMBIGUITY A37)
            wt += float(w)
        if not wt < 1.0:
            raise ToolError(f"config: the weights sum to {wt!r}; with unweighted datasets in the job "
                            "they must sum to less than 1", 2)
    return datasets


def load_config(path):
    """Read the job TOML; fill in defaults; resolve paths against its directory."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    base = os.path.dirname(os.path.abspath(path))

    def sect(name):
        return raw.get(name, {}) or {}

    tk, bt, sc, rk, ch = (sect(n) for n in ("tokenizer", "batch", "schedule", "ranks", "cache"))
    cfg = {
        "datasets": load_datasets_config(raw, base),
        "datasets_form": "datasets" in raw,   # [[datasets]]: --report lists them (AMBIGUITY A39)
        "tok_type": tk.get("type", "sentencepiece"),
        "tok_path": os.path.join(base, tk.get("path", "tokenizer.model")),
        "template": tk.get("template", "chatml"),  # the daemon's default
        "default_system": tk.get("default_system"),
        "size": int(bt.get("size", 4)),
        "max_length": int(bt.get("max_length", 2048)),
        "padding": bt.get("padding", "longest"),
        "truncation": bt.get("truncation", "right"),
        "loss": bt.get("loss", "all_assistant"),
        "keep_untrained": bt.get("keep_untrained", False),
        "epochs": int(sc.get("epochs", 1)),
        "shuffle": bool(sc.get("shuffle", True)),
        "seed": int(sc.get("seed", 42)),
        "drop_last": bool(sc.get("drop_last", False)),
        "world_size": int(rk.get("world_size", 1)),
    }
    checks = {
        "tok_type": ("sentencepiece", "hf"),
        "template": tuple(DEFAULT_SYSTEM),
        "padding": PADDINGS,
        "truncation": ("right", "left", "drop"),
        "loss": ("all_assistant", "last_assistant", "all"),
    }
    for key, allowed in checks.items():
        if cfg[key] not in allowed:
            raise ToolError(f"config: {key} = {cfg[key]!r}, expected one of {allowed}")
    if not isinstance(cfg["keep_untrained"], bool):
        raise ToolError("config: [batch] keep_untrained: expected true or false")
    # Spec 4.1: packing window and padding_free capacity (A23).
    cfg["pack_window"] = _int(bt, "batch", "pack_window", 1000, 1)
    cfg["tokens"] = _int(bt, "batch", "tokens", cfg["max_length"], 1)
    if cfg["padding"] == "padding_free" and cfg["tokens"] < cfg["max_length"]:
        raise ToolError(f"config: [batch] tokens = {cfg['tokens']}, expected >= max_length "
                        f"({cfg['max_length']}) with padding = \"padding_free\"")
    # Which global ranks a node serves does not change any rank's stream (A27).
    _int(rk, "ranks", "node_rank", 0, 0)
    _int(rk, "ranks", "local_ranks", cfg["world_size"], 1)
    # Spec 6: batches are byte-identical with and without the token cache (A28).
    _typed(ch, "cache", "enabled", True, bool, "true or false")
    _typed(ch, "cache", "dir", "", str, "a string")
    import tokfeed_ref_eval   # section 7, beside this file
    tokfeed_ref_eval.load_eval_config(raw, base, cfg)
    return cfg


# ---------------------------------------------------------------- section 1: reading records

JSON_WS = b" \t\r\n"


def _reject_constant(name):
    raise ValueError(f"invalid JSON constant {name}")


def _loads(text):
    """json.loads without Python's NaN/Infinity extension (AMBIGUITY A14)."""
    return json.loads(text, parse_constant=_reject_constant)


def _check_strings(v):
    """Reject strings holding lone surrogates (not representable in UTF-8; A14)."""
    if isinstance(v, str):
        v.encode("utf-8")
    elif isinstance(v, list):
        for x in v:
            _check_strings(x)
    elif isinstance(v, dict):
        for k, x in v.items():
            _check_strings(k)
            _check_strings(x)


def _to_record(obj):
    if not isinstance(obj, dict):
        raise BadRecord("malformed JSON: not an object")
    try:
        _check_strings(obj)
    except UnicodeEncodeError:
        raise BadRecord("malformed JSON: invalid surrogate in string") from None
    return obj


def read_records(path, limit=None):
    """Spec 1 "Records" for one plain file: yield (line, record-or-BadRecord)."""
    with open(path, "rb") as f:
        data = f.read()
    yield from read_records_bytes(data, limit)


def read_records_bytes(data, limit=None):
    """Spec 1 "Records": yield (line, record-or-BadRecord) in file order.

    JSONL, or one JSON array when the first non-whitespace byte is '['.
    The line is the 1-based line on which the record starts (in a
    compressed shard's decompressed bytes, spec 1.1).
    """
    first = data.lstrip(JSON_WS)[:1]
    if first == b"[":
        yield from _read_array(data, limit)
    else:
        yield from _read_jsonl(data, limit)


def _read_jsonl(data, limit):
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if limit is not None:
        lines = lines[:limit]
    for n, raw in enumerate(lines, 1):
        if raw.strip(JSON_WS) == b"":
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield n, BadRecord(f"malformed JSON: invalid UTF-8 ({e.reason})")
            continue
        try:
            obj = _loads(text)
        except ValueError as e:
            yield n, BadRecord(f"malformed JSON: {e}")
            continue
        try:
            yield n, _to_record(obj)
        except BadRecord as e:
            yield n, e


def _read_array(data, limit):
    """Walk a JSON array with raw_decode to know where each element starts (A15)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        yield line, BadRecord(f"malformed JSON: invalid UTF-8 ({e.reason})")
        return
    dec = json.JSONDecoder(parse_constant=_reject_constant)
    ws = " \t\r\n"
    pos = text.index("[") + 1
    line_of = lambda p: text.count("\n", 0, p) + 1  # noqa: E731
    count = 0

    def skip(p):
        while p < len(text) and text[p] in ws:
            p += 1
        return p

    pos = skip(pos)
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        if limit is not None and count >= limit:
            return
        pos = skip(pos)
        start = pos
        try:
            obj, pos = dec.raw_decode(text, pos)
        except ValueError as e:
            yield line_of(start), BadRecord(f"malformed JSON: {e}")
            return
        count += 1
        try:
            yield line_of(start), _to_record(obj)
        except BadRecord as e:
            yield line_of(start), e
        pos = skip(pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1
            continue
        if pos < len(text) and text[pos] == "]":
            return
        yield line_of(pos), BadRecord("malformed JSON: expected ',' or ']' in array")
        return


# ---------------------------------------------------------------- section 1.1: shards

def resolve_shards(ds):
    """Spec 1.1 `path` -> its shards [(name, resolved path)], sorted bytewise.

    A glob (holds * ? or [): its matches that are regular files; a
    directory: every regular file below it with a shard suffix; else the
    file itself. Names are built from the path as written (AMBIGUITY A30, A31).
    """
    written, base = ds["path"], ds["base"]
    full = os.path.join(base, written)
    if any(c in written for c in GLOB_CHARS):
        found = [(m, os.path.join(base, m)) for m in glob.glob(written, root_dir=base)]
        found = [(name, path) for name, path in found if os.path.isfile(path)]
        if not found:
            raise ToolError(f"dataset path {written!r}: the glob matches no file", 2)
    elif os.path.isdir(full):
        def fail(err):
            raise ToolError(f"dataset path {written!r}: cannot read {err.filename}: {err.strerror}", 2)
        found = []
        for top, _, files in os.walk(full, onerror=fail):
            for fname in files:
                path = os.path.join(top, fname)
                if fname.endswith(SHARD_SUFFIXES) and os.path.isfile(path):
                    found.append((os.path.join(written, os.path.relpath(path, full)), path))
        if not found:
            raise ToolError(f"dataset path {written!r}: the directory holds no "
                            f"{'/'.join(SHARD_SUFFIXES)} file", 2)
    elif os.path.exists(full):
        found = [(written, full)]
    else:
        raise ToolError(f"dataset path {written!r}: no such file or directory", 2)
    return sorted(found, key=lambda f: os.fsencode(f[0]))


class ShardError(ToolError):
    """A corrupt or truncated compressed shard (spec 1.1), exit 2."""

    def __init__(self, name, kind, offset, why):
        super().__init__(f"{name}: corrupt {kind} shard at compressed byte offset {offset}: {why}", 2)


def _gzip_failure(data):
    """Where Python's gzip rejected `data`: -> (compressed byte offset, reason) (AMBIGUITY A32, A33).

    Walks the members as gzip.decompress does (RFC 1952 header, raw deflate,
    CRC-32 and size trailer, zero padding skipped); for bad deflate data the
    offset is the byte whose arrival made zlib fail.
    """
    n, pos = len(data), 0
    if n == 0:
        return 0, "empty file, no gzip member"
    while True:
        start = pos
        if data[pos:pos + 2] != b"\x1f\x8b"[:n - pos]:
            return start, "not a gzip member"
        if n - pos < 10:
            return n, "truncated gzip header"
        if data[pos + 2] != 8:
            return start + 2, f"unknown compression method {data[pos + 2]}"
        flags, pos = data[pos + 3], pos + 10
        if flags & 4:   # FEXTRA
            if n - pos < 2:
                return n, "truncated gzip header"
            pos += 2 + int.from_bytes(data[pos:pos + 2], "little")
        for bit in (8, 16):   # FNAME, FCOMMENT: zero-terminated
            if flags & bit:
                end = data.find(b"\0", pos)
                if end < 0:
                    return n, "truncated gzip header"
                pos = end + 1
        if flags & 2:   # FHCRC
            pos += 2
        if pos > n:
            return n, "truncated gzip header"
        inflate, crc, size, at = zlib.decompressobj(-zlib.MAX_WBITS), 0, 0, pos
        while not inflate.eof and at < n:
            chunk, saved = data[at:at + 65536], inflate.copy()
            try:
                out = inflate.decompress(chunk)
            except zlib.error:
                for i in range(len(chunk)):   # again, byte by byte, from the state before the chunk
                    try:
                        saved.decompress(chunk[i:i + 1])
                    except zlib.error as e:
                        return at + i, f"bad deflate data ({e})"
                return at, "bad deflate data"
            crc, size, at = zlib.crc32(out, crc), size + len(out), at + len(chunk)
        if not inflate.eof:
            return n, "truncated deflate data"
        trailer = at - len(inflate.unused_data)
        if n - trailer < 8:
            return n, "truncated gzip trailer"
        want_crc, want_size = struct.unpack("<II", data[trailer:trailer + 8])
        if want_crc != crc:
            return trailer, "CRC-32 mismatch"
        if want_size != size & 0xFFFFFFFF:
            return trailer + 4, "size mismatch"
        pos = trailer + 8
        while pos < n and data[pos] == 0:
            pos += 1
        if pos == n:
            return None


def gunzip_shard(data, name):
    """Spec 1.1: a .gz shard's decompressed bytes (several members allowed)."""
    if data:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:   # gzip.BadGzipFile is an OSError
            failure = _gzip_failure(data) or (len(data), str(e))
    else:
        failure = _gzip_failure(data)
    raise ShardError(name, "gzip", *failure)


ZSTD_MAGIC = 0xFD2FB528


def _zstd_frames(data):
    """Walk zstd frames (RFC 8878) without decoding them (AMBIGUITY A32, A33).

    -> ([(start, end, skippable)], None) or (frames so far, (offset, reason)).
    """
    n, pos, frames = len(data), 0, []
    if n == 0:
        return frames, (0, "empty file, no zstd frame")
    while pos < n:
        start = pos
        if n - pos < 4:
            return frames, (n, "truncated frame magic")
        magic = int.from_bytes(data[pos:pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:   # skippable frame
            if n - pos < 8:
                return frames, (n, "truncated skippable frame")
            pos += 8 + int.from_bytes(data[pos + 4:pos + 8], "little")
            if pos > n:
                return frames, (n, "truncated skippable frame")
            frames.append((start, pos, True))
            continue
        if magic != ZSTD_MAGIC:
            return frames, (start, "not a zstd frame")
        pos += 4
        if pos >= n:
            return frames, (n, "truncated frame header")
        fhd = data[pos]
        if fhd & 0x08:
            return frames, (pos, "reserved bit set in the frame header")
        single = bool(fhd & 0x20)
        pos += (1 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
                + ((1 if single else 0), 2, 4, 8)[fhd >> 6])
        if pos > n:
            return frames, (n, "truncated frame header")
        while True:
            if n - pos < 3:
                return frames, (n, "truncated block header")
            header = int.from_bytes(data[pos:pos + 3], "little")
            btype = (header >> 1) & 3
            if btype == 3:
                return frames, (pos, "reserved block type")
            pos += 3 + (1 if btype == 1 else header >> 3)
            if pos > n:
                return frames, (n, "truncated block")
            if header & 1:
                break
        if fhd & 4:   # content checksum
            pos += 4
            if pos > n:
                return frames, (n, "truncated content checksum")
        frames.append((start, pos, False))
    return frames, None


def _zstd_cli(data):
    """`zstd -dcq` on data via stdin -> (ok, stdout, last stderr line)."""
    try:
        p = subprocess.run(["zstd", "-dcq"], input=data, capture_output=True)
    except FileNotFoundError:
        raise ToolError("reading .zst shards needs the zstd command line (Debian package zstd)", 3) from None
    err = p.stderr.decode("utf-8", "replace").strip().splitlines()
    err = err[-1].replace("/*stdin*\\ : ", "").strip() if err else f"zstd exited {p.returncode}"
    return p.returncode == 0, p.stdout, err


def unzstd_shard(data, name):
    """Spec 1.1: a .zst shard's decompressed bytes (several frames allowed)."""
    frames, failure = _zstd_frames(data)
    if failure is not None:
        raise ShardError(name, "zstd", *failure)
    ok, out, err = _zstd_cli(data)
    if ok:
        return out
    for start, end, skippable in frames:   # the first frame zstd(1) rejects
        if not skippable:
            f_ok, _, f_err = _zstd_cli(data[start:end])
            if not f_ok:
                raise ShardError(name, "zstd", start, f_err)
    raise ShardError(name, "zstd", 0, err)


def read_shard(name, path):
    """Spec 1.1: a shard's bytes, decompressed by its name's suffix (AMBIGUITY A32)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ToolError(f"{name}: {e.strerror}", 2) from None
    if path.endswith(".gz"):
        return gunzip_shard(data, name)
    if path.endswith(".zst"):
        return unzstd_shard(data, name)
    return data


# ---------------------------------------------------------------- section 1: records -> conversations

ROLES = ("system", "user", "assistant")
SHAREGPT_ROLE = {"human": "user", "user": "user", "gpt": "assistant",
                 "assistant": "assistant", "system": "system"}


def _req_str(obj, key, name):
    """A required string field (spec 1: missing or not a string -> bad)."""
    if key not in obj:
        raise BadRecord(f"field '{name}': missing")
    v = obj[key]
    if not isinstance(v, str):
        raise BadRecord(f"field '{name}': expected a string")
    return v


def _opt_str(obj, key, name):
    """An optional string field: absent or null -> None (A3 for wrong types)."""
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise BadRecord(f"field '{name}': expected a string")
    return v


def _req_list(obj, key, name):
    if key not in obj:
        raise BadRecord(f"field '{name}': missing")
    v = obj[key]
    if not isinstance(v, list):
        raise BadRecord(f"field '{name}': expected an array")
    return v


def detect_format(rec):
    """Spec 1 table, `auto`: rows tried top to bottom (key presence, A4; a
    null value counts as absent)."""
    def has(*keys):
        return all(rec.get(k) is not None for k in keys)
    for fmt, keys in (("messages", ("messages",)), ("sharegpt", ("conversations",)),
                      ("alpaca", ("instruction", "output")), ("query_response", ("query", "response")),
                      ("prompt_completion", ("prompt", "completion")), ("text", ("text",))):
        if has(*keys):
            return fmt
    raise BadRecord("no format matches")


def _parse_turns(rec, key, role_key, content_key, role_map):
    """messages / sharegpt: list of objects -> [(raw_role, mapped_role, content)]."""
    out = []
    for i, m in enumerate(_req_list(rec, key, key)):
        if not isinstance(m, dict):
            raise BadRecord(f"field '{key}[{i}]': expected an object")
        role = _req_str(m, role_key, f"{key}[{i}].{role_key}")
        content = _req_str(m, content_key, f"{key}[{i}].{content_key}")
        out.append((role, role_map(role), content))
    return out


def parse_messages(rec):
    return _parse_turns(rec, "messages", "role", "content",
                        lambda r: r if r in ROLES else None)


def parse_sharegpt(rec):
    return _parse_turns(rec, "conversations", "from", "value", SHAREGPT_ROLE.get)


def parse_alpaca(rec):
    instruction = _req_str(rec, "instruction", "instruction")
    inp = _opt_str(rec, "input", "input")
    output = _req_str(rec, "output", "output")
    system = _opt_str(rec, "system", "system")
    user = instruction + ("\n" + inp if inp else "")
    turns = [("system", "system", system)] if system is not None else []
    return turns + [("user", "user", user), ("assistant", "assistant", output)]


def parse_query_response(rec):
    query = _req_str(rec, "query", "query")
    response = _req_str(rec, "response", "response")
    system = _opt_str(rec, "system", "system")
    history = rec.get("history")
    turns = [("system", "system", system)] if system is not None else []
    if history is not None:
        if not isinstance(history, list):
            raise BadRecord("field 'history': expected an array")
        for i, pair in enumerate(history):
            if not isinstance(pair, list) or len(pair) != 2:
                raise BadRecord(f"field 'history[{i}]': expected a [query, response] pair")
            for j, role in ((0, "user"), (1, "assistant")):
                if not isinstance(pair[j], str):
                    raise BadRecord(f"field 'history[{i}][{j}]': expected a string")
                turns.append((role, role, pair[j]))
    return turns + [("user", "user", query), ("assistant", "assistant", response)]


class Plain:
    """Spec 1.3: a plain-text record, read without a template: `text` (the
    text, or the completion) and `prompt` (prompt_completion; else None)."""

    def __init__(self, prompt, text):
        self.prompt, self.text = prompt, text


def _plain_str(rec, key):
    if rec.get(key) is None:
        raise BadRecord(f"field '{key}' is missing")
    v = rec[key]
    if isinstance(v, list):
        raise BadRecord(f"field '{key}': expected a string (a list of messages is a conversational {key}: "
                        "give it as 'messages')")
    if not isinstance(v, str):
        raise BadRecord(f"field '{key}': expected a string")
    return v


def parse_plain(rec, fmt, placeholders):
    """Spec 1.3: prompt_completion or text -> Plain (placeholders applied)."""
    prompt = None
    if fmt == "text":
        text = _plain_str(rec, "text")
        if text == "":
            raise BadRecord("field 'text' is empty")
    else:
        prompt = _plain_str(rec, "prompt")
        text = _plain_str(rec, "completion")
        if text == "":
            raise BadRecord("field 'completion' is empty")
    if placeholders:
        prompt = None if prompt is None else apply_placeholders([("user", prompt)], placeholders)[0][1]
        text = apply_placeholders([("assistant", text)], placeholders)[0][1]
        if text == "":
            raise BadRecord("the text is empty once placeholders are applied")
    return Plain(prompt, text)


PARSERS = {"messages": parse_messages, "sharegpt": parse_sharegpt,
           "alpaca": parse_alpaca, "query_response": parse_query_response}


def validate(turns, template):
    """Spec 1 "Bad records", conversation-level checks, in the listed order (A1)."""
    for raw, role, _ in turns:
        if role is None:
            raise BadRecord(f"unknown role '{raw}'")
    for _, role, content in turns:
        if role in ("user", "assistant") and content == "":
            raise BadRecord(f"empty {role} turn")
    if not any(role == "assistant" for _, role, _ in turns):
        raise BadRecord("no assistant turn")
    for i, (_, role, _) in enumerate(turns):
        if role == "system" and i != 0:
            raise BadRecord("system message must come first")
    if template in ("mistral", "llama2"):
        rest = [role for _, role, _ in turns if role != "system"]
        for i, role in enumerate(rest):
            if role != ("user" if i % 2 == 0 else "assistant"):
                raise BadRecord("roles must alternate user/assistant")


def apply_placeholders(conv, placeholders):
    """Spec 1 "Placeholders": {{NAME}} -> value in every content (one pass, A7)."""
    if not placeholders:
        return conv
    pat = re.compile("|".join(re.escape("{{" + k + "}}") for k in placeholders))
    sub = lambda m: str(placeholders[m.group(0)[2:-2]])  # noqa: E731
    return [(role, pat.sub(sub, content)) for role, content in conv]


def rename_columns(rec, columns):
    """Spec 1.1 `columns`: rename top-level fields, all at once (AMBIGUITY A34).

    `source`, when present and not null, is read as `target`; a source is
    absent under its own name; a target's own field is hidden when a field
    renamed to it is present (first in the table's order wins).
    """
    if not columns:
        return rec
    out = {k: v for k, v in rec.items() if k not in columns}
    renamed = set()
    for source, target in columns.items():
        if target not in renamed and rec.get(source) is not None:
            out[target] = rec[source]
            renamed.add(target)
    return out


class ToolChat:
    """A qwen2_5 record with tool content (spec 2): its section 1.2 messages and tools."""

    def __init__(self, msgs, tools):
        self.msgs, self.tools = msgs, tools


def _placeholder_text(text, placeholders):
    return apply_placeholders([("", text)], placeholders)[0][1] if placeholders else text


def _tool_call(content):
    """ms-swift's tool_call content -> the HF form (spec 1.2)."""
    call = json.loads(content) if isinstance(content, str) else content
    if not isinstance(call, dict) or "name" not in call:
        raise BadRecord("a tool call must be a JSON object {\"name\", \"arguments\"}")
    if isinstance(call.get("function"), dict):
        return call
    return {"type": "function", "function": {"name": call["name"], "arguments": call.get("arguments", {})}}


def _reasoning_of(m):
    """A message's reasoning under any of transformers' names (reasoning_content,
    thinking, reasoning: the first that is not None), or None."""
    return next((m[k] for k in ("reasoning_content", "thinking", "reasoning") if m.get(k) is not None), None)


def tool_chat(rec, ds, reasoning=False):
    """Spec 1.2 under qwen2_5 and qwen3 (AMBIGUITY A40): a ToolChat when the
    record has tool content (with `reasoning`, qwen3's: also a message with
    reasoning), else None (section 1 reads it)."""
    rec = rename_columns(rec, ds["columns"])
    if ds["format"] not in ("auto", "messages") or not isinstance(rec.get("messages"), list):
        return None
    tools = rec.get("tools")
    try:
        if isinstance(tools, str):
            tools = json.loads(tools)
        if tools is not None and not isinstance(tools, list):
            return None
        msgs, joined = [], False
        for m in rec["messages"]:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                return None
            m = dict(m)
            if m["role"] == "tool_call":
                call = _tool_call(m.get("content"))
                if joined:
                    msgs[-1]["tool_calls"].append(call)
                else:
                    msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
                joined = True
                continue
            joined = False
            if m["role"] == "tool_response":
                m["role"] = "tool"
            if isinstance(m.get("content"), str):
                m["content"] = _placeholder_text(m["content"], ds["placeholders"])
            msgs.append(m)
    except (ValueError, BadRecord):
        return None
    if not msgs:
        return None
    if isinstance(rec.get("system"), str) and msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": rec["system"]})
    if tools or any(m["role"] == "tool" or m.get("tool_calls") for m in msgs):
        return ToolChat(msgs, tools)
    if reasoning and any(_reasoning_of(m) is not None for m in msgs):
        return ToolChat(msgs, tools)
    return None


def to_conversation(rec, ds, template):
    """Record -> validated conversation [(role, content)] or raise BadRecord.

    ds is the record's dataset (format, columns, placeholders; spec 1, 1.1).
    Under qwen2_5 and qwen3 a record with tool content is a ToolChat (spec 2, A40).
    A plain-text record is a Plain, whatever the template (spec 1.3).
    """
    renamed = rename_columns(rec, ds["columns"])
    fmt = ds["format"]
    if fmt == "auto":
        try:
            fmt = detect_format(renamed)
        except BadRecord:
            pass
    if fmt in ("prompt_completion", "text"):
        return parse_plain(renamed, fmt, ds["placeholders"])
    if template in TOOL_RENDERERS:
        chat = tool_chat(rec, ds, reasoning=template == "qwen3")
        if chat is not None:
            try:
                TOOL_RENDERERS[template](chat, DEFAULT_SYSTEM[template], Renderer())
            except (TypeError, KeyError, AttributeError) as e:
                raise BadRecord(f"template error: {e}") from None
            return chat
    rec = rename_columns(rec, ds["columns"])
    fmt = ds["format"]
    if fmt == "auto":
        fmt = detect_format(rec)
    turns = PARSERS[fmt](rec)
    # Placeholders are applied before the checks (spec section 1).
    conv = apply_placeholders([(role, content) for _, role, content in turns], ds["placeholders"])
    validate([(where, role, content) for (where, _, _), (role, content) in zip(turns, conv)], template)
    return conv


class LateBad:
    """A record checked when read and found bad (spec 1.1, AMBIGUITY A41):
    a valid record of the plan that every epoch leaves out (spec 4.1)."""

    def __init__(self, msg):
        self.msg = msg


class Corpus:
    """The job's valid records, numbered across datasets (spec 1.1), and what was read.

    convs: conversations of the valid records 0..N-1 (dataset 0's shards in
    order, each in file order, then dataset 1's, ...); bad: (dataset, line,
    "shard:line: reason") in reading order; datasets: per dataset {"path",
    "shards", "records", "valid", "bad", "offset"} (offset = o_d).
    """

    def __init__(self):
        self.convs, self.bad, self.datasets = [], [], []
        self.listed = []   # every bad record's message in reading order, checked when read too (A41)

    def sizes(self):
        return [info["valid"] for info in self.datasets]


def load_datasets(cfg, limit=None):
    """Spec 1, 1.1: read every dataset's shards -> Corpus (limit: per shard, AMBIGUITY A35)."""
    corpus = Corpus()
    for d, ds in enumerate(cfg["datasets"] + cfg.get("eval_datasets", [])):   # section 7: evaluation ones last
        shards = resolve_shards(ds)
        info = {"path": ds["path"], "shards": len(shards), "records": 0, "valid": 0, "bad": 0,
                "offset": len(corpus.convs)}
        for name, path in shards:
            for line, rec in read_records_bytes(read_shard(name, path), limit):
                info["records"] += 1
                if not isinstance(rec, BadRecord):
                    try:
                        corpus.convs.append(to_conversation(rec, ds, cfg["template"]))
                        info["valid"] += 1
                        continue
                    except BadRecord as e:
                        rec = e
                msg = f"{name}:{line}: {rec}"
                if ds["when_read"]:
                    # A41: a record of the plan, left out where it lands (4.1).
                    corpus.convs.append(LateBad(msg))
                    corpus.listed.append(msg)
                    info["valid"] += 1
                    continue
                corpus.listed.append(msg)
                info["bad"] += 1
                corpus.bad.append((d, line, msg))
        corpus.datasets.append(info)
    return corpus


def load_dataset(cfg, limit=None):
    """Valid records (conversations, in job order) and bad ones as (line, "shard:line: reason")."""
    corpus = load_datasets(cfg, limit)
    return corpus.convs, [(line, msg) for _, line, msg in corpus.bad]


# ---------------------------------------------------------------- section 2: templates

class Renderer:
    """Accumulates the rendered string and trained spans in UTF-8 byte offsets."""

    def __init__(self):
        self.parts = []
        self.pos = 0          # bytes so far
        self.spans = []       # (begin, end) bytes, per assistant turn: list

    def emit(self, s):
        start = self.pos
        self.parts.append(s)
        self.pos += len(s.encode("utf-8"))
        return start, self.pos

    def text(self):
        return "".join(self.parts)


def _system_and_rest(conv, template, default_system):
    """Split off the system message; fall back to default_system / template default."""
    if conv and conv[0][0] == "system":
        return conv[0][1], conv[1:]
    if default_system is not None:
        return default_system, conv
    return DEFAULT_SYSTEM[template], conv


def render_mistral(conv, system, r):
    """Spec 2 `mistral`: <s>[INST] {user} [/INST]{assistant}</s> ..."""
    r.emit("<s>")
    first = True
    for role, content in conv:
        if role == "user":
            if first and system:  # a non-empty system message (spec section 2)
                content = system + "\n\n" + content
            first = False
            r.emit("[INST] " + content + " [/INST]")
        else:
            b, _ = r.emit(content)
            _, e = r.emit("</s>")
            r.spans.append([(b, e)])


def render_llama2(conv, system, r):
    """Spec 2 `llama2`: <s>[INST] <<SYS>>..{user} [/INST] {assistant} </s>; strip()."""
    first = True
    for role, content in conv:
        content = content.strip()
        if role == "user":
            r.emit("<s>[INST] ")
            if first and system:  # a non-empty system message, tested before stripping
                r.emit("<<SYS>>\n" + system.strip() + "\n<</SYS>>\n\n")
            first = False
            r.emit(content + " [/INST]")
        else:
            # The prefix rule: the turn's whole " {assistant} </s>" is trained.
            r.spans.append([r.emit(" " + content + " </s>")])


def render_chatml(conv, system, r):
    """Spec 2 `chatml` / `qwen2_5`: <|im_start|>{role}\\n{content}<|im_end|>\\n."""
    msgs = ([("system", system)] if system is not None else []) + conv
    for role, content in msgs:
        r.emit("<|im_start|>" + role + "\n")
        span = r.emit(content + "<|im_end|>\n")  # the prefix rule trains the "\n" too
        if role == "assistant":
            r.spans.append([span])


def _qwen3_last_query(msgs):
    """Spec 2 `qwen3` q: last user message that is not a <tool_response>...</tool_response>."""
    for i in range(len(msgs) - 1, -1, -1):
        role, content = msgs[i]
        if role == "user" and not (content.startswith("<tool_response>")
                                   and content.endswith("</tool_response>")):
            return i
    return len(msgs) - 1


def _qwen3_split(content):
    """Spec 2 `qwen3`: content -> (reasoning, answer)."""
    if "</think>" not in content:
        return "", content
    answer = content.split("</think>")[-1].lstrip("\n")
    reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
    return reasoning, answer


def render_qwen3(conv, system, r):
    """Spec 2 `qwen3`: ChatML; think block after the last query; no default system."""
    msgs = ([("system", system)] if system is not None else []) + conv
    q = _qwen3_last_query(msgs)
    for i, (role, content) in enumerate(msgs):
        r.emit("<|im_start|>" + role + "\n")
        if role != "assistant":
            r.emit(content + "<|im_end|>\n")
            continue
        reasoning, answer = _qwen3_split(content)
        if i > q and (i == len(msgs) - 1 or reasoning):
            body = "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" + answer.lstrip("\n")
        else:
            body = answer
        r.spans.append([r.emit(body + "<|im_end|>\n")])


def render_llama3(conv, system, r):
    """Spec 2 `llama3`: <|begin_of_text|>, headers, strip(), trailing assistant header."""
    msgs = ([("system", system)] if system is not None else []) + conv
    r.emit("<|begin_of_text|>")
    for role, content in msgs:
        r.emit("<|start_header_id|>" + role + "<|end_header_id|>\n\n")
        span = r.emit(content.strip() + "<|eot_id|>")
        if role == "assistant":
            r.spans.append([span])
    r.emit("<|start_header_id|>assistant<|end_header_id|>\n\n")


QWEN_TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
QWEN_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                   "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                   "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")


def _emit_qwen_tools(tools, r):
    """Qwen2.5's and Qwen3's `# Tools` text with the tool list, closing the system turn."""
    r.emit(QWEN_TOOLS_HEAD)
    for tool in tools:
        r.emit("\n" + json.dumps(tool, ensure_ascii=False))
    r.emit(QWEN_TOOLS_TAIL)


def _emit_qwen_other(msgs, i, r):
    """A message of a Qwen tool record that is not the assistant's: consecutive
    tool results share one user turn; any other role is ChatML."""
    role, content = msgs[i]["role"], msgs[i].get("content")
    if role == "tool":
        if i == 0 or msgs[i - 1]["role"] != "tool":
            r.emit("<|im_start|>user")
        r.emit("\n<tool_response>\n" + content + "\n</tool_response>")
        if i + 1 == len(msgs) or msgs[i + 1]["role"] != "tool":
            r.emit("<|im_end|>\n")
    else:
        r.emit("<|im_start|>" + role + "\n" + content + "<|im_end|>\n")


def render_qwen2_5_tools(chat, default_system, r):
    """Spec 2 `qwen2_5` with tool content: Qwen2.5's own template, trained
    text by the prefix rule (each assistant turn after its header)."""
    msgs = chat.msgs
    if msgs and msgs[0]["role"] == "system":
        system, msgs = msgs[0]["content"], msgs[1:]
    else:
        system = default_system
    if chat.tools:
        r.emit("<|im_start|>system\n" + system + "\n\n")
        _emit_qwen_tools(chat.tools, r)
    else:
        r.emit("<|im_start|>system\n" + system + "<|im_end|>\n")
    for i, m in enumerate(msgs):
        role, content = m["role"], m.get("content")
        if role == "assistant":
            r.emit("<|im_start|>assistant\n")
            calls = m.get("tool_calls")
            if calls:
                body = content if content else ""
                for k, call in enumerate(calls):
                    f = call["function"] if "function" in call else call
                    body += ("\n" if k or content else "") + '<tool_call>\n{"name": "' + f["name"] + \
                        '", "arguments": ' + json.dumps(f["arguments"], ensure_ascii=False) + "}\n</tool_call>"
            else:
                body = content
            r.spans.append([r.emit(body + "<|im_end|>\n")])
        else:
            _emit_qwen_other(msgs, i, r)


def render_qwen3_tools(chat, default_system, r):
    """Spec 2 `qwen3` with tool content: Qwen3's own template (the tools text
    after the system content, no default system; think blocks as render_qwen3;
    string arguments as they are), trained text as qwen2_5's."""
    msgs = chat.msgs
    if msgs and msgs[0]["role"] == "system":
        system, msgs = msgs[0]["content"], msgs[1:]
    else:
        system = default_system
    if chat.tools:
        r.emit("<|im_start|>system\n" + (system + "\n\n" if system is not None else ""))
        _emit_qwen_tools(chat.tools, r)
    elif system is not None:
        r.emit("<|im_start|>system\n" + system + "<|im_end|>\n")
    q = _qwen3_last_query([(m["role"], m.get("content")) for m in msgs])
    for i, m in enumerate(msgs):
        role, content = m["role"], m.get("content")
        if role == "assistant":
            r.emit("<|im_start|>assistant\n")
            reasoning = _reasoning_of(m)
            if reasoning is None:
                reasoning, answer = _qwen3_split(content)
            else:
                answer = content
            if i > q and (i == len(msgs) - 1 or reasoning):
                body = "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" + answer.lstrip("\n")
            else:
                body = answer
            for k, call in enumerate(m.get("tool_calls") or []):
                f = call["function"] if call.get("function") else call
                args = f["arguments"]
                body += ("\n" if k or answer else "") + '<tool_call>\n{"name": "' + f["name"] + '", "arguments": ' + \
                    (args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)) + "}\n</tool_call>"
            r.spans.append([r.emit(body + "<|im_end|>\n")])
        else:
            _emit_qwen_other(msgs, i, r)


TOOL_RENDERERS = {"qwen2_5": render_qwen2_5_tools, "qwen3": render_qwen3_tools}

RENDERERS = {"mistral": render_mistral, "llama2": render_llama2,
             "chatml": render_chatml, "qwen2_5": render_chatml,
             "qwen3": render_qwen3, "llama3": render_llama3}


def render(conv, cfg):
    """Spec 2: conversation -> (string, trained byte spans)."""
    template = cfg["template"]
    r = Renderer()
    if isinstance(conv, ToolChat):
        default = cfg["default_system"] if cfg["default_system"] is not None else DEFAULT_SYSTEM[template]
        TOOL_RENDERERS[template](conv, default, r)
    else:
        system, rest = _system_and_rest(conv, template, cfg["default_system"])
        RENDERERS[template](rest, system, r)
    per_turn = r.spans
    if cfg["loss"] == "all":  # every byte of the text (spec 2.2)
        per_turn = [[(0, r.pos)]] if r.pos else []
    if cfg["loss"] == "last_assistant":
        per_turn = per_turn[-1:]
    return r.text(), [s for turn in per_turn for s in turn]


# ---------------------------------------------------------------- section 3: tokenization

_CP_START = re.compile(rb"[^\x80-\xbf]")


def _byte_offsets(text):
    """offs[i] = UTF-8 byte offset of code point i of text (len(text)+1 entries).

    Pure-ASCII text returns None: offsets are then the identity.
    """
    if text.isascii():
        return None
    raw = text.encode("utf-8")
    # code points start at the bytes that are not UTF-8 continuation bytes
    offs = [m.start() for m in _CP_START.finditer(raw)]
    offs.append(len(raw))
    return offs


def _sp_piece_types(model_path):
    """Piece types from the .model protobuf (minimal wire-format reader).

    ModelProto.pieces = field 1 (repeated message); SentencePiece.piece = 1,
    .type = 3 (NORMAL=1 UNKNOWN=2 CONTROL=3 USER_DEFINED=4 UNUSED=5 BYTE=6).
    """
    data = open(model_path, "rb").read()

    def varint(buf, p):
        v = shift = 0
        while True:
            x = buf[p]
            p += 1
            v |= (x & 0x7F) << shift
            shift += 7
            if not x & 0x80:
                return v, p

    def fields(buf):
        p = 0
        while p < len(buf):
            key, p = varint(buf, p)
            fno, wt = key >> 3, key & 7
            if wt == 0:
                v, p = varint(buf, p)
            elif wt == 1:
                v, p = buf[p:p + 8], p + 8
            elif wt == 2:
                n, p = varint(buf, p)
                v, p = buf[p:p + n], p + n
            elif wt == 5:
                v, p = buf[p:p + 4], p + 4
            else:
                raise ToolError(f"{model_path}: unsupported protobuf wire type {wt}")
            yield fno, v

    out = []
    for fno, v in fields(data):
        if fno == 1:
            piece, ptype = "", 1
            for f2, v2 in fields(v):
                if f2 == 1:
                    piece = v2.decode("utf-8")
                elif f2 == 3:
                    ptype = v2
            out.append((piece, ptype))
    return out


class SentencePieceTokenizer:
    """Spec 3 for SentencePiece: split out control/user-defined/unk, encode the rest."""

    def __init__(self, path):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_file=path)
        types = _sp_piece_types(path)
        if len(types) != self.sp.get_piece_size():
            raise ToolError(f"{path}: protobuf piece count mismatch")
        self.special = {}
        for i, (piece, ptype) in enumerate(types):
            if ptype in (2, 3, 4) and piece and piece not in self.special:
                self.special[piece] = i
        assert self.sp.id_to_piece(self.sp.unk_id()) in self.special
        alts = sorted(self.special, key=lambda s: (-len(s.encode("utf-8")), s))
        self.split_re = re.compile("|".join(map(re.escape, alts))) if alts else None
        self.pad_id = self.sp.pad_id() if self.sp.pad_id() >= 0 else 0
        self.eos_token = self.sp.id_to_piece(self.sp.eos_id()) if self.sp.eos_id() >= 0 else None

    def encode_with_specials(self, text):
        """A .model has no post-processor: nothing is added (spec 3.2)."""
        return [t[0] for t in self.encode(text)]

    def _encode_piece(self, text, start, end, offs, out):
        """Encode text[start:end] on its own; append (id, b, e) in bytes of text.

        Python's sentencepiece reports code-point offsets into the piece
        (checked: "你好" gives 0-1, 1-2); offs maps code points of the whole
        text to UTF-8 byte offsets (None: ASCII, identity). See A10.
        """
        if start == end:
            return
        pieces = self.sp.encode(text[start:end], out_type="immutable_proto").pieces
        if offs is None:
            out.extend((p.id, start + p.begin, start + p.end) for p in pieces)
        else:
            out.extend((p.id, offs[start + p.begin], offs[start + p.end]) for p in pieces)

    def encode(self, text):
        """-> [(id, begin_byte, end_byte)] for the whole rendered string."""
        out = []
        offs = _byte_offsets(text)
        at = (lambda i: i) if offs is None else offs.__getitem__
        last = 0
        if self.split_re is not None:
            # Python's re alternation takes the first alternative matching at the
            # leftmost position; alternatives are sorted longest first.
            for m in self.split_re.finditer(text):
                self._encode_piece(text, last, m.start(), offs, out)
                out.append((self.special[m.group(0)], at(m.start()), at(m.end())))
                last = m.end()
        self._encode_piece(text, last, len(text), offs, out)
        return out


class HFTokenizer:
    """Spec 3 for HF tokenizer.json via the `tokenizers` package (if importable)."""

    def __init__(self, path):
        try:
            import tokenizers
        except ImportError:
            raise ToolError("tokenizer type 'hf' needs the Python package "
                            "'tokenizers', which is not importable", code=3) from None
        self.tok = tokenizers.Tokenizer.from_file(path)
        self.tok.no_padding()
        self.tok.no_truncation()
        self.pad_id = 0
        cfg_path = os.path.join(os.path.dirname(path), "tokenizer_config.json")
        pad = self.eos_token = None
        if os.path.exists(cfg_path):
            with open(cfg_path, encoding="utf-8") as f:
                config = json.load(f)
            pad, self.eos_token = config.get("pad_token"), config.get("eos_token")
        map_path = os.path.join(os.path.dirname(path), "special_tokens_map.json")
        if os.path.exists(map_path):   # its tokens win, as transformers reads the two files
            with open(map_path, encoding="utf-8") as f:
                tokens = json.load(f)
            pad = tokens.get("pad_token") if tokens.get("pad_token") is not None else pad
            if tokens.get("eos_token") is not None:
                self.eos_token = tokens["eos_token"]
        if isinstance(pad, dict):
            pad = pad.get("content")
        if isinstance(self.eos_token, dict):
            self.eos_token = self.eos_token.get("content")
        if pad is not None and self.tok.token_to_id(pad) is not None:
            self.pad_id = self.tok.token_to_id(pad)

    def encode_with_specials(self, text):
        """tokenizer(text): the post-processor's special tokens added."""
        return self.tok.encode(text, add_special_tokens=True).ids

    def encode(self, text):
        enc = self.tok.encode(text, add_special_tokens=False)
        offs = _byte_offsets(text)
        if offs is None:
            return list(zip(enc.ids, (b for b, _ in enc.offsets), (e for _, e in enc.offsets)))
        return [(i, offs[b], offs[e]) for i, (b, e) in zip(enc.ids, enc.offsets)]


def make_tokenizer(cfg):
    if cfg["tok_type"] == "hf":
        return HFTokenizer(cfg["tok_path"])
    return SentencePieceTokenizer(cfg["tok_path"])


def label_tokens(tokens, spans):
    """Spec 3 labels: id where [b,e) overlaps a trained span, else -100.

    Overlap: max(b, s.b) < min(e, s.e); an empty range b == e is trained
    when s.b <= b < s.e.
    """
    spans = [(sb, se) for sb, se in spans if sb < se]  # an empty span trains nothing
    labels = []
    for tid, b, e in tokens:
        if b == e:
            hit = any(sb <= b < se for sb, se in spans)
        else:
            hit = any(b < se and sb < e for sb, se in spans)  # == max(b,sb) < min(e,se) for b<e, sb<se
        labels.append(tid if hit else IGNORE)
    return labels


def tokenize_sample(conv, cfg, tok):
    """Conversation -> (ids, labels) before truncation."""
    if isinstance(conv, Plain):
        return tokenize_plain(conv, cfg, tok)
    text, spans = render(conv, cfg)
    tokens = tok.encode(text)
    return [t[0] for t in tokens], label_tokens(tokens, spans)


def tokenize_plain(p, cfg, tok):
    """Spec 1.3 / 3: TRL's tokenization of a standard (plain-text) record:
    the eos text appended to the text or completion unless it ends with it,
    tokenizer(text) with its special tokens, and every token trained but
    those the prompt's own tokenization shares from the start."""
    text = p.text
    if tok.eos_token and not text.endswith(tok.eos_token):
        text += tok.eos_token
    ids = tok.encode_with_specials((p.prompt or "") + text)
    untrained = 0
    if p.prompt is not None and cfg["loss"] != "all":
        pids = tok.encode_with_specials(p.prompt)
        while untrained < min(len(ids), len(pids)) and ids[untrained] == pids[untrained]:
            untrained += 1
    return ids, [IGNORE] * untrained + ids[untrained:]


def truncate(ids, labels, cfg):
    """Spec 3 truncation: -> (ids, labels) or None when dropped."""
    m = cfg["max_length"]
    if len(ids) <= m:
        return ids, labels
    if cfg["truncation"] == "right":
        return ids[:m], labels[:m]
    if cfg["truncation"] == "left":
        return ids[len(ids) - m:], labels[len(labels) - m:]
    return None


# ---------------------------------------------------------------- section 4: order

class SplitMix64:
    """Spec 4 splitmix64, all arithmetic modulo 2^64."""

    def __init__(self, state):
        self.state = state & MASK64

    def next(self):
        self.state = (self.state + GOLDEN) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def shuffled(n, state):
    """Spec 4's loop: [0..n) shuffled from n-1 down to 1 with j = next() % (i+1)."""
    perm = list(range(n))
    rng = SplitMix64(state)
    for i in range(n - 1, 0, -1):
        j = rng.next() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def permutation(n, epoch, cfg):
    """Spec 4: the permutation of [0..n), shuffled when schedule.shuffle."""
    if not cfg["shuffle"]:
        return list(range(n))
    return shuffled(n, (cfg["seed"] & MASK64) ^ ((epoch * GOLDEN) & MASK64))


def mix_counts(sizes, datasets):
    """Spec 1.1 "Counts": c_d, the samples each dataset gives an epoch.

    sizes[d] = n_d. Unweighted: n_d or `samples`; weighted datasets share
    T_w = T - F by largest remainder, ties to the first in config order.
    """
    counts = [None] * len(sizes)
    for d, ds in enumerate(datasets):
        if ds["weight"] is None:
            counts[d] = sizes[d] if ds["samples"] is None else ds["samples"]
    weighted = [d for d, ds in enumerate(datasets) if ds["weight"] is not None]
    if weighted:
        F = sum(c for c in counts if c is not None)
        Wt = 0.0
        for d in weighted:   # config order, doubles (AMBIGUITY A37)
            Wt += float(datasets[d]["weight"])
        if len(weighted) == len(datasets):
            T = sum(sizes)
        else:   # Wt < 1 was checked with the config
            T = math.floor(float(F) / (1.0 - Wt) + 0.5)
        Tw = T - F
        x = {d: float(Tw) * float(datasets[d]["weight"]) / Wt for d in weighted}
        for d in weighted:
            counts[d] = math.floor(x[d])
        left = Tw - sum(counts[d] for d in weighted)
        assert 0 <= left <= len(weighted), (Tw, x)
        for d in sorted(weighted, key=lambda d: (-(x[d] - math.floor(x[d])), d))[:left]:
            counts[d] += 1
    for d, (n_d, c_d) in enumerate(zip(sizes, counts)):
        if n_d == 0 and c_d > 0:   # AMBIGUITY A37
            raise ToolError(f"dataset {d} ({datasets[d]['path']!r}) has no valid record "
                            f"but is to give {c_d} samples an epoch", 2)
    return counts


class Mix:
    """Spec 1.1: the datasets' sizes n_d, offsets o_d and counts c_d -> the sample list L.

    ids[d] (section 7): dataset d's records as valid-record numbers, when
    they are not o_d .. o_d + n_d - 1 (a training dataset less its held-out
    records).
    """

    def __init__(self, sizes, datasets, ids=None):
        self.sizes = list(sizes)
        self.offsets = [sum(self.sizes[:d]) for d in range(len(self.sizes))]
        self.ids = ids or [list(range(o, o + n)) for o, n in zip(self.offsets, self.sizes)]
        self.counts = mix_counts(self.sizes, datasets)

    def draw(self, d, epoch, seed, seed_index=None):
        """Spec 1.1 "Draw": dataset d's samples of an epoch (valid-record numbers).

        Its records in order q times, then m of them without replacement:
        the first m of [0..n_d) shuffled by spec 4's loop with its own seed,
        sorted, mapped to their records. Whatever schedule.shuffle says
        (AMBIGUITY A37). seed_index: the d of the seed (section 7: an
        evaluation dataset's index in the job).
        """
        n_d, c_d, ids = self.sizes[d], self.counts[d], self.ids[d]
        if c_d == 0:
            return []
        q, m = divmod(c_d, n_d)
        out = list(ids) * q
        if m:
            sd = d if seed_index is None else seed_index
            state = (seed & MASK64) ^ ((epoch * GOLDEN) & MASK64) ^ (((sd + 1) * DRAW_MUL) & MASK64)
            out += [ids[i] for i in sorted(shuffled(n_d, state)[:m])]
        return out

    def sample_list(self, epoch, seed):
        """Spec 1.1: L, dataset 0's samples, then dataset 1's, ...; len(L) = N_e = sum c_d."""
        return [i for d in range(len(self.sizes)) for i in self.draw(d, epoch, seed)]


def epoch_order(n, epoch, cfg, mix=None):
    """Spec 4: the epoch's order L[perm[0]], L[perm[1]], ... over its sample list.

    Entries are valid-record numbers (a record may occur more than once).
    mix None: L = [0..n), so the order is the permutation itself.
    """
    if mix is None:
        return permutation(n, epoch, cfg)
    L = mix.sample_list(epoch, cfg["seed"])
    return [L[p] for p in permutation(len(L), epoch, cfg)]


def shard(perm, rank, cfg):
    """Spec 4: torch DistributedSampler sharding; rank's sample indices."""
    n, world = len(perm), cfg["world_size"]
    if cfg["drop_last"]:
        total = (n // world) * world
        idx = perm[:total]
    else:
        total = -(-n // world) * world
        pad = total - n
        idx = perm + (perm * -(-pad // n))[:pad] if pad else list(perm)
    return idx[rank:total:world]


def epoch_batches(n_r, cfg):
    """Spec 4: list of (start, end) sample ranges for one epoch of one rank."""
    size = cfg["size"]
    nb = n_r // size if cfg["drop_last"] else -(-n_r // size)
    return [(k * size, min((k + 1) * size, n_r)) for k in range(nb)]


# ---------------------------------------------------------------- section 4.1: rows

def pack_window(window, lengths, capacity):
    """Spec 4.1 best-fit decreasing over one window of samples -> rows.

    Samples are visited by length descending, ties by position in the window
    (a stable sort). Each goes into the open row with the least free space
    that still fits it, ties to the row opened first; when none fits, a new
    row is opened after the others. `free` is kept sorted by (free space,
    opening index), so the first entry >= (l, -1) is exactly that row.
    Rows come back in opening order, samples in the order they were put in.
    """
    order = sorted(range(len(window)), key=lambda i: -lengths[window[i]])
    rows, free = [], []
    for i in order:
        sample = window[i]
        need = lengths[sample]
        at = bisect.bisect_left(free, (need, -1))
        if at < len(free):
            space, r = free.pop(at)
        else:
            space, r = capacity, len(rows)
            rows.append([])
        rows[r].append(sample)
        bisect.insort(free, (space - need, r))
    return rows


def pack_rows(samples, lengths, capacity, window):
    """Spec 4.1: consecutive windows of `window` samples, each packed on its own."""
    rows = []
    for start in range(0, len(samples), window):
        rows.extend(pack_window(samples[start:start + window], lengths, capacity))
    return rows


def leaves_samples_out(cfg):
    """Spec 4.1: whether a sample may be left out by what tokenizing it finds."""
    return cfg["truncation"] == "drop" or not cfg.get("keep_untrained", False)


def epoch_rows(perm, cfg, lengths=None, untrained=None):
    """Spec 4.1: the rows of an epoch, each a list of valid record indices.

    `lengths` maps a record to its token count after truncation, None when
    dropped by truncation = "drop"; `untrained` maps a record to True when
    none of its labels is trained after truncation. Samples left out (dropped;
    untrained unless keep_untrained) are taken out of `perm` first, keeping
    its order (returned, counted by the caller). Padded modes: one sample per
    row; without `lengths`, `perm` itself. Packed modes: best-fit decreasing
    over windows.  -> (rows, left-out samples)
    """
    if lengths is None:
        if cfg["padding"] in PACKED:
            raise ToolError("packed modes need every sample's length")
        return [[s] for s in perm], []
    keep_untrained = cfg.get("keep_untrained", False)

    def left_out(s):
        return lengths[s] is None or (not keep_untrained and untrained is not None and untrained[s])

    kept = [s for s in perm if not left_out(s)]
    gone = [s for s in perm if left_out(s)]
    if cfg["padding"] not in PACKED:
        return [[s] for s in kept], gone
    capacity = cfg["max_length"] if cfg["padding"] == "packed" else cfg["tokens"]
    return pack_rows(kept, lengths, capacity, cfg["pack_window"]), gone


# ---------------------------------------------------------------- section 4.2: ranks and steps

def rows_per_step(cfg):
    """Spec 4.2: S is batch.size, 1 with padding_free (also in 4.3, A24)."""
    return 1 if cfg["padding"] == "padding_free" else cfg["size"]


def step_count(n, world, cfg):
    """Spec 4.2: B, the number of steps of every rank for a segment of n rows."""
    S = rows_per_step(cfg)
    if cfg["padding"] in PACKED:
        return n // (world * S) if cfg["drop_last"] else -(-n // (world * S))
    n_r = n // world if cfg["drop_last"] else -(-n // world)
    return n_r // S if cfg["drop_last"] else -(-n_r // S)


def split_tail(tail, world, segment):
    """Spec 4.2 last step: while fewer rows than ranks and a row holds two or
    more samples, move the last sample of the row with the most samples
    (ties: the first) to a row of its own at the end; then, while still fewer
    rows than ranks, append one-sample rows repeating the segment's samples
    from its start. Works on a copy (A26)."""
    tail = [list(row) for row in tail]
    while len(tail) < world:
        most = max(range(len(tail)), key=lambda i: (len(tail[i]), -i), default=None)
        if most is None or len(tail[most]) < 2:
            break
        tail.append([tail[most].pop()])
    flat = [s for row in segment for s in row]
    j = 0
    while len(tail) < world:
        tail.append([flat[j % len(flat)]])
        j += 1
    return tail


def deal_packed(Q, rank, world, cfg):
    """Spec 4.2, packed modes: rank's steps, each a list of rows of Q.

    Step k deals the block Q[k*R*S:(k+1)*R*S], row p to rank p mod R; the
    last step (without drop_last) deals the tail after split_tail, which
    gives every rank at least one row.
    """
    S = rows_per_step(cfg)
    B = step_count(len(Q), world, cfg)
    steps = []
    for k in range(B):
        block = Q[k * world * S:(k + 1) * world * S]
        if k == B - 1 and not cfg["drop_last"]:
            block = split_tail(Q[k * world * S:], world, Q)
        steps.append(block[rank::world])
    return steps


def deal_padded(Q, rank, world, cfg):
    """Spec 4.2, longest / max_length: section 4's DistributedSampler rule over Q."""
    mine = shard(Q, rank, dict(cfg, world_size=world))
    return [mine[b:e] for b, e in epoch_batches(len(mine), cfg)]


def deal(Q, rank, world, cfg):
    """Spec 4.2: the steps of one rank over the segment Q (lists of rows)."""
    if cfg["padding"] in PACKED:
        return deal_packed(Q, rank, world, cfg)
    return deal_padded(Q, rank, world, cfg)


# ---------------------------------------------------------------- section 4.3: elastic resume

def elastic_start(position, rows_of, cfg):
    """Spec 4.3: (epoch, step, world size R, base b) -> (e0, s0, first step).

    rows_of(e) gives epoch e's rows. A step of B (the segment's step count at
    R) is the start of the next epoch. At the same world size the stream is
    repositioned inside the old segment (its steps keep their numbers, A20);
    at another one it restarts at b + step*R*S with steps from 0 (AMBIGUITY A20).
    """
    epoch, step, world, base = position
    n_rows = len(rows_of(epoch))
    if not 0 <= base <= n_rows:
        raise ToolError(f"--elastic-from: base {base} outside epoch {epoch}'s {n_rows} rows")
    B = step_count(n_rows - base, world, cfg)
    if not 0 <= step <= B:
        raise ToolError(f"--elastic-from: step {step} outside [0, {B}] (B at world size {world}, base {base})")
    if step == B:
        return epoch + 1, 0, 0
    if world == cfg["world_size"]:
        return epoch, base, step
    return epoch, base + step * world * rows_per_step(cfg), 0


# ---------------------------------------------------------------- section 5: batches

def build_batch(rows, cfg, pad_id):
    """Spec 5 padded modes: pad rows to L; -> dict of the four tensors as lists."""
    if cfg["padding"] == "max_length":
        L = cfg["max_length"] if rows else 0
    else:
        L = max((len(ids) for ids, _ in rows), default=0)
    out = {"input_ids": [], "attention_mask": [], "labels": [], "position_ids": []}
    for ids, labels in rows:
        n, p = len(ids), L - len(ids)
        out["input_ids"].append(ids + [pad_id] * p)
        out["attention_mask"].append([1] * n + [0] * p)
        out["labels"].append(labels + [IGNORE] * p)
        out["position_ids"].append(list(range(n)) + [0] * p)
    return out


def build_packed_batch(rows, cfg, pad_id):
    """Spec 5 packed modes: rows = [[(ids, labels) per sample]] -> tensors.

    A row is its samples' tokens one after the other, L = max_length
    (packed) or the row's token count (padding_free); the label of each
    sample's first token is -100; position_ids restart at 0 per sample;
    cu_seqlens / max_seqlen are flat lists, and so are cu_seq_lens_q /
    max_length_q: offsets into the rows flattened with their padding, a
    row's padding run one segment after its samples. padding_free has no
    attention_mask. 0 rows: [] tensors, cu_seqlens [0], max_seqlen [0] (A25).
    """
    free = cfg["padding"] == "padding_free"
    out = {"input_ids": [], "attention_mask": [], "labels": [], "position_ids": []}
    seqlens = []
    for row in rows:
        ids, labels, pos = [], [], []
        for s_ids, s_labels in row:
            ids += s_ids
            labels += ([IGNORE] + s_labels[1:]) if s_labels else []
            pos += range(len(s_ids))
            seqlens.append(len(s_ids))
        n = len(ids)
        p = 0 if free else cfg["max_length"] - n
        out["input_ids"].append(ids + [pad_id] * p)
        out["attention_mask"].append([1] * n + [0] * p)
        out["labels"].append(labels + [IGNORE] * p)
        out["position_ids"].append(pos + [0] * p)
    if free:
        del out["attention_mask"]
    cu = [0]
    for n in seqlens:
        cu.append(cu[-1] + n)
    out["cu_seqlens"] = cu
    out["max_seqlen"] = [max(seqlens, default=0)]
    hf = [0]
    for row, row_ids in zip(rows, out["input_ids"]):
        end = hf[-1] + len(row_ids)
        for s_ids, _ in row:
            hf.append(hf[-1] + len(s_ids))
        if hf[-1] < end:
            hf.append(end)
    out["cu_seq_lens_q"] = hf
    out["max_length_q"] = [max((b - a for a, b in zip(hf, hf[1:])), default=0)]
    return out


def plan(n, rank, epochs, cfg, start=(0, 0, 0), rows_of=None):
    """Spec 4-4.2: yield (epoch, step, [row, ...]) in stream order, lazily.

    start = (e0, s0, first step): epoch e0's segment is rows[s0:], its steps
    from `first step` on (4.3 repositioning); later epochs start at 0.
    Steps are numbered within their segment (A20).
    rows_of(e) gives epoch e's rows (default: padded rows of perm).
    """
    e0, s0, k0 = start
    if rows_of is None:
        rows_of = lambda e: epoch_rows(permutation(n, e, cfg), cfg)[0]  # noqa: E731
    for epoch in range(e0, epochs):
        rows = rows_of(epoch)
        base = s0 if epoch == e0 else 0
        if base > len(rows):
            raise ToolError(f"start base {base} is beyond epoch {epoch}'s {len(rows)} rows")
        steps = deal(rows[base:], rank, cfg["world_size"], cfg)
        first = k0 if epoch == e0 else 0
        for step in range(first, len(steps)):
            yield epoch, step, steps[step]


class Samples:
    """Tokenized, truncated samples, each record tokenized once (spec 3)."""

    def __init__(self, convs, cfg, tok):
        self.convs, self.cfg, self.tok = convs, cfg, tok
        self.cache = {}

    def get(self, i):
        """-> (ids, labels) after truncation, or None when dropped."""
        if i not in self.cache:
            if isinstance(self.convs[i], LateBad):
                self.cache[i] = None
            else:
                self.cache[i] = truncate(*tokenize_sample(self.convs[i], self.cfg, self.tok), self.cfg)
        return self.cache[i]

    def lengths(self):
        """Token count of every valid record after truncation (None: dropped)."""
        return [None if t is None else len(t[0]) for t in map(self.get, range(len(self.convs)))]

    def length(self, i):
        """Token count of record i after truncation (None: dropped); tokenizes on demand."""
        t = self.get(i)
        return None if t is None else len(t[0])

    def untrained(self, i):
        """True when record i is kept by truncation but has no trained label."""
        t = self.get(i)
        return t is not None and all(x == IGNORE for x in t[1])


class _Lengths:
    """samples.length as a sequence, so that only the records of an epoch's
    order are tokenized (AMBIGUITY A38)."""

    def __init__(self, samples):
        self.samples = samples

    def __getitem__(self, i):
        return self.samples.length(i)


class _Untrained(_Lengths):
    """samples.untrained as a sequence, tokenizing on demand like _Lengths."""

    def __getitem__(self, i):
        return self.samples.untrained(i)


def make_rows_of(samples, cfg, stats, mix=None):
    """Epoch -> rows (spec 4.1) over the epoch's order (spec 1.1, 4), memoized;
    each epoch's left-out samples are counted once (A21)."""
    memo = {}
    n = len(samples.convs)
    late = any(isinstance(c, LateBad) for c in samples.convs)

    def rows_of(epoch):
        if epoch not in memo:
            facts = cfg["padding"] in PACKED or leaves_samples_out(cfg) or late
            lengths = _Lengths(samples) if facts else None
            untrained = _Untrained(samples) if facts else None
            rows, gone = epoch_rows(epoch_order(n, epoch, cfg, mix), cfg, lengths, untrained)
            memo[epoch] = (rows, gone)
        return memo[epoch][0]

    def count_dropped(epoch):
        for s in memo[epoch][1]:
            if isinstance(samples.convs[s], LateBad):
                continue   # counted once per record in --report (A41)
            stats["dropped" if samples.get(s) is None else "untrained"] += 1

    return rows_of, count_dropped


def stream(cfg, convs, tok, rank, epochs, stats, count=None, start=(0, 0, 0), elastic=None, mix=None):
    """Yield (epoch, step, batch) for rank across all epochs (spec 4-5).

    elastic = (epoch, step, world size, base) computes `start` by 4.3.
    mix (spec 1.1) gives each epoch's sample list; None: L = [0..N).
    """
    samples = Samples(convs, cfg, tok)
    rows_of, count_dropped = make_rows_of(samples, cfg, stats, mix)
    if elastic is not None:
        start = elastic_start(elastic, rows_of, cfg)
    packed = cfg["padding"] in PACKED
    counted = set()
    it = plan(len(convs), rank, epochs, cfg, start, rows_of)
    for epoch, step, rows in itertools.islice(it, count):
        if epoch not in counted:
            counted.add(epoch)
            count_dropped(epoch)
        yield epoch, step, make_batch(rows, samples, cfg, tok, stats)


def make_batch(rows, samples, cfg, tok, stats):
    """Spec 5: a padded batch of `rows` (each [record]), less dropped samples."""
    if cfg["padding"] in PACKED:
        batch_rows = [[samples.get(i) for i in row] for row in rows]
        for t in (t for row in batch_rows for t in row):
            if all(x == IGNORE for x in t[1]):
                stats["all_masked"] += 1  # A22: judged before the boundary -100
        return build_packed_batch(batch_rows, cfg, tok.pad_id)
    batch_rows = []
    for (i,) in rows:
        t = samples.get(i)
        if t is None:
            stats["dropped"] += 1
            continue
        if all(x == IGNORE for x in t[1]):
            stats["all_masked"] += 1
        batch_rows.append(t)
    return build_batch(batch_rows, cfg, tok.pad_id)


def dump_line(epoch, step, batch):
    obj = {"epoch": epoch, "step": step}
    obj.update(batch)
    return json.dumps(obj, separators=(",", ":"))


# ---------------------------------------------------------------- main

def _position(text):
    """--elastic-from "epoch,step,world_size,base" -> a tuple of four ints."""
    try:
        epoch, step, world, base = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected EPOCH,STEP,WORLD_SIZE,BASE") from None
    if min(epoch, step, base) < 0 or world < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers >= 0 and a world size >= 1")
    return epoch, step, world, base


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--count", type=int, default=None, help="print at most N batches")
    ap.add_argument("--epochs-override", type=int, default=None)
    ap.add_argument("--limit-records", type=int, default=None,
                    help="use only the first N lines (JSONL) / elements (array) of each shard")
    ap.add_argument("--report", action="store_true", help="JSON summary to stderr")
    ap.add_argument("--bad-records", action="store_true",
                    help="print 'shard:line: reason' per bad record (all datasets) and exit")
    ap.add_argument("--start-epoch", type=int, default=0, help="stream start e0 (spec 4.2)")
    ap.add_argument("--start-base", type=int, default=0, help="stream start s0: epoch e0's first row")
    ap.add_argument("--split", choices=("train", "eval"), default="train",
                    help="eval: the evaluation stream (spec 7), --passes passes of it")
    ap.add_argument("--passes", type=int, default=1, help="evaluation passes to print (--split eval)")
    ap.add_argument("--elastic-from", type=_position, default=None, metavar="EPOCH,STEP,WORLD_SIZE,BASE",
                    help="resume from a position of a stream at WORLD_SIZE ranks (spec 4.3)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
        if not 0 <= args.rank < cfg["world_size"]:
            raise ToolError(f"--rank {args.rank} outside world_size {cfg['world_size']}")
        corpus = load_datasets(cfg, args.limit_records)
        convs = corpus.convs
        if args.bad_records:
            for msg in corpus.listed:
                print(msg)
            return 0
        all_datasets = cfg["datasets"] + cfg["eval_datasets"]
        for d, _, msg in corpus.bad:   # on_bad_record is per dataset (AMBIGUITY A36)
            if all_datasets[d]["on_bad_record"] == "fail":
                print(msg, file=sys.stderr)
                return 2
        import tokfeed_ref_eval
        mix, eval_set = tokfeed_ref_eval.splits(corpus, cfg)
        tok = make_tokenizer(cfg)
        if args.split == "eval":
            if cfg["eval"] is None:
                raise ToolError("--split eval: the config has no [eval] (E2)", 2)
            stats = {"dropped": 0, "untrained": 0, "all_masked": 0}
            for p, step, batch in tokfeed_ref_eval.eval_stream(cfg, convs, tok, args.rank, args.passes, stats,
                                                               eval_set):
                sys.stdout.write(dump_line(p, step, batch) + "\n")
            sys.stdout.flush()
            if args.report:
                print(json.dumps({"eval_samples": len(eval_set), "dropped": stats["dropped"],
                                  "untrained": stats["untrained"], "all_masked": stats["all_masked"]}),
                      file=sys.stderr)
            return 0
        epochs = cfg["epochs"] if args.epochs_override is None else args.epochs_override
        stats = {"dropped": 0, "untrained": 0, "all_masked": 0}
        out = sys.stdout
        if args.elastic_from is not None and (args.start_epoch or args.start_base):
            raise ToolError("--elastic-from computes the start: give no --start-epoch / --start-base")
        if args.start_epoch < 0 or args.start_base < 0:
            raise ToolError("--start-epoch and --start-base must be >= 0")
        start = (args.start_epoch, args.start_base, 0)
        for epoch, step, batch in stream(cfg, convs, tok, args.rank, epochs, stats, args.count,
                                         start, args.elastic_from, mix):
            out.write(dump_line(epoch, step, batch) + "\n")
        out.flush()
        if args.report:
            report = {"valid_records": len(convs), "bad_records": [m for _, _, m in corpus.bad],
                      "dropped": stats["dropped"], "untrained": stats["untrained"],
                      "all_masked": stats["all_masked"]}
            if any(ds["when_read"] for ds in all_datasets):   # AMBIGUITY A41
                report["bad_when_read"] = sum(isinstance(c, LateBad) for c in convs)
            if cfg["datasets_form"]:   # AMBIGUITY A39
                report["datasets"] = [{"path": info["path"], "shards": info["shards"],
                                       "records": info["records"], "valid": info["valid"],
                                       "bad": info["bad"], "samples_per_epoch": c}
                                      for info, c in zip(corpus.datasets, mix.counts)]
            print(json.dumps(report, ensure_ascii=False), file=sys.stderr)
        return 0
    except ToolError as e:
        print(f"tokfeed_ref: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
