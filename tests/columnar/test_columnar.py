"""Parquet and Arrow datasets (docs/data_model.md 1.1) give the batches their
records give as JSONL, byte for byte; damaged and unusable files are named.

The columnar files are written from the JSONL records by pyarrow and by HF
`datasets` from PyPI, in the interpreter that runs this (TOKFEED_HF_PYTHON);
without pyarrow the test skips (77), without `datasets` its cases do; with a
tokfeedd built without Arrow, only the error that says how to enable it is
checked.
Paths come from ctest: TOKFEED_BUILD_DIR, TOKFEED_SOURCE_DIR.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

SOURCE_DIR = os.environ.get("TOKFEED_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("TOKFEED_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
TOKFEEDD = os.path.join(BUILD_DIR, "daemon", "tokfeedd")
TOKFEEDCTL = os.path.join(BUILD_DIR, "tools", "tokfeedctl")
SFT = os.path.join(SOURCE_DIR, "tests", "data", "sft")
SP_MODEL = os.path.join(SOURCE_DIR, "tests", "data", "tokenizers", "sp32k", "tokenizer.model")
WITH_ARROW = os.environ.get("TOKFEED_WITH_ARROW", "1") == "1"

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError as e:  # not in this interpreter
    pa = None
    IMPORT_ERROR = str(e)
try:
    import datasets
except ImportError:
    datasets = None


def tool_records():
    """Chat records whose messages carry extra keys on some turns only (tool
    calls with nested arguments, a name), so that Arrow's struct holds nulls
    where a JSONL record has no key."""
    out = []
    for i in range(24):
        msgs = [{"role": "system", "content": f"You may call tools. #{i}"},
                {"role": "user", "content": f"What is {i} + {i * 3}? Use the tool."}]
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "add", "arguments": {"a": i, "b": i * 3}}}
        msgs.append({"role": "assistant", "content": f"The sum is {i * 4}.", "tool_calls": [call]}
                    if i % 3 == 0 else {"role": "assistant", "content": f"{i} + {i * 3} = {i * 4}"})
        if i % 4 == 1:
            msgs[1]["name"] = "alice"
        rec = {"messages": msgs}
        if i % 2 == 0:
            rec["tools"] = [{"type": "function", "function": {"name": "add", "description": "a + b"}}]
        out.append(rec)
    return out


def source_records():
    recs = []
    for name in ("mixed-300.jsonl", "edge.jsonl", "think.jsonl"):
        with open(os.path.join(SFT, name), encoding="utf-8") as f:
            recs += [json.loads(line) for line in f if line.strip()]
    return recs + tool_records()


class Job:
    """A private tokfeedd over `datasets_toml`; dump() gives its batches."""

    def __init__(self, tmp, datasets_toml, *, name=None, cache=True, extra="", batch=None):
        self.name = name or uuid.uuid4().hex[:8]
        self.socket = os.path.join(tmp, self.name + ".sock")
        self.config = os.path.join(tmp, self.name + ".toml")
        cache_dir = os.path.join(tmp, "cache")
        with open(self.config, "w") as f:
            f.write(f"""{datasets_toml}
[tokenizer]
type = "sentencepiece"
path = "{SP_MODEL}"
template = "mistral"
{batch or DEFAULT_BATCH}
[schedule]
epochs = 2
{extra}
[server]
socket = "{self.socket}"
shm_prefix = "test-col-{os.getpid()}-{self.name}"
[cache]
dir = "{cache_dir}"
enabled = {"true" if cache else "false"}
""")

    def check(self):
        return subprocess.run([TOKFEEDD, "--check-config", self.config], capture_output=True, text=True)

    def dump(self):
        log = open(self.config + ".log", "w")
        proc = subprocess.Popen([TOKFEEDD, "--config", self.config], stderr=log)
        try:
            for _ in range(2400):
                if os.path.exists(self.socket):
                    break
                if proc.poll() is not None:
                    raise AssertionError("tokfeedd exited: " + open(self.config + ".log").read())
                time.sleep(0.025)
            out = subprocess.run([TOKFEEDCTL, "-s", self.socket, "dump", "--rank", "0"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise AssertionError("dump failed: " + out.stderr + open(self.config + ".log").read())
            return out.stdout
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            log.close()


DEFAULT_BATCH = "[batch]\nsize = 4\nmax_length = 512\n"


def dataset(path, rest=""):
    # Rows checked at start unless the test says otherwise: then Parquet,
    # Arrow and JSONL leave bad records out alike (docs/data_model.md 1.1).
    rows = "" if "check_rows" in rest else 'check_rows = "start"\n'
    return f'[[datasets]]\npath = "{path}"\non_bad_record = "skip"\n{rows}{rest}\n'


@unittest.skipIf(pa is None, "pyarrow and datasets are not installed for this Python")
class ColumnarTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tokfeed-columnar-")
        cls.records = source_records()
        cls.jsonl = os.path.join(cls.tmp, "all.jsonl")
        with open(cls.jsonl, "w", encoding="utf-8") as f:
            for r in cls.records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        cls.table = pa.Table.from_struct_array(pa.array(cls.records))  # every key of every record
        cls.want = None

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, *parts):
        p = os.path.join(self.tmp, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def baseline(self):
        if ColumnarTest.want is None:
            ColumnarTest.want = Job(self.tmp, dataset(self.jsonl), name="jsonl").dump()
            self.assertGreater(len(ColumnarTest.want.splitlines()), 100)
        return ColumnarTest.want

    def assert_same(self, datasets_toml, what, **kw):
        got = Job(self.tmp, datasets_toml, **kw).dump()
        want = self.baseline()
        for i, (a, b) in enumerate(zip(got.splitlines(), want.splitlines())):
            self.assertEqual(a, b, f"{what}: batch {i} differs from the JSONL one")
        self.assertEqual(len(got.splitlines()), len(want.splitlines()), what)
        self.assertEqual(got, want, what)

    @unittest.skipUnless(WITH_ARROW, "tokfeed built without Arrow")
    def test_one_parquet_file_with_row_groups(self):
        p = self.path("one", "train.parquet")
        pq.write_table(self.table, p, row_group_size=64)
        self.assertGreater(pq.ParquetFile(p).num_row_groups, 3)
        self.assert_same(dataset(p), "one Parquet file")
        # Read in place: no copy of the rows in the cache dir, only the
        # index of the valid rows (the file has a bad record).
        cache = os.path.join(self.tmp, "cache")
        self.assertEqual(os.listdir(os.path.join(cache, "spool")), [])
        kept = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(os.path.join(cache, "index"))
                   for f in fs)
        self.assertLess(kept, os.path.getsize(p) // 4)
        # Without the cache, rows checked again: the same.
        self.assert_same(dataset(p), "one Parquet file, no cache", cache=False)

    @unittest.skipUnless(WITH_ARROW, "tokfeed built without Arrow")
    def test_parquet_shards_folder_and_glob(self):
        n = self.table.num_rows
        cuts = [0, 100, 101, 250, n]
        for k in range(4):
            pq.write_table(self.table.slice(cuts[k], cuts[k + 1] - cuts[k]),
                           self.path("shards", f"train-{k:05d}-of-00004.parquet"), row_group_size=40)
        with open(self.path("shards", "README.md"), "w") as f:
            f.write("not data\n")
        with open(self.path("shards", "dataset_info.json"), "w") as f:
            f.write("{}\n")  # metadata beside the shards, not a shard
        self.assert_same(dataset(self.path("shards")), "a folder of Parquet shards")
        self.assert_same(dataset(self.path("shards", "train-*.parquet")), "a glob of Parquet shards")

    @unittest.skipUnless(WITH_ARROW, "tokfeed built without Arrow")
    @unittest.skipIf(datasets is None, "HF datasets is not installed for this Python")
    def test_hf_datasets_save_to_disk_and_to_parquet(self):
        ds = datasets.Dataset.from_json(self.jsonl, cache_dir=self.path("hf-cache", "x"))
        self.assertEqual(len(ds), len(self.records))
        folder = self.path("saved", "x")[:-2]
        ds.save_to_disk(folder, num_shards=3)
        arrows = sorted(f for f in os.listdir(folder) if f.endswith(".arrow"))
        self.assertEqual(len(arrows), 3)
        self.assert_same(dataset(folder), "a save_to_disk folder")
        self.assert_same(dataset(os.path.join(folder, "data-*.arrow")), "its .arrow files")
        hub = self.path("hub", "train.parquet")
        ds.to_parquet(hub)
        self.assert_same(dataset(hub), "datasets' to_parquet")
        # A DatasetDict folder: one split's folder is the dataset; the whole is refused.
        dd_dir = self.path("dict", "x")[:-2]
        datasets.DatasetDict({"train": ds, "test": ds.select(range(10))}).save_to_disk(dd_dir)
        out = Job(self.tmp, dataset(dd_dir)).check()
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("a `datasets` DatasetDict folder: name one of its splits' folders", out.stderr)
        self.assert_same(dataset(os.path.join(dd_dir, "train")), "a DatasetDict's train split")

    @unittest.skipUnless(WITH_ARROW, "tokfeed built without Arrow")
    def test_arrow_ipc_file_and_mixed_with_jsonl(self):
        p = self.path("ipc", "all.arrow")
        with pa.OSFile(p, "wb") as sink, pa.ipc.new_file(sink, self.table.schema) as w:
            for b in self.table.to_batches(max_chunksize=70):
                w.write_batch(b)
        self.assert_same(dataset(p), "an Arrow IPC file")
        # [[datasets]] mixing JSONL with Parquet: as two JSONL datasets.
        half = self.path("mix", "half.parquet")
        pq.write_table(self.table.slice(200), half)
        first = self.path("mix", "first.jsonl")
        rest = self.path("mix", "rest.jsonl")
        with open(first, "w", encoding="utf-8") as f, open(rest, "w", encoding="utf-8") as g:
            for i, r in enumerate(self.records):
                (f if i < 200 else g).write(json.dumps(r, ensure_ascii=False) + "\n")
        head = dataset(first, "samples = 150\n")
        want = Job(self.tmp, head + dataset(rest, "samples = 300\n")).dump()
        got = Job(self.tmp, head + dataset(half, "samples = 300\n")).dump()
        self.assertEqual(got, want, "JSONL mixed with Parquet")

    @unittest.skipUnless(WITH_ARROW, "tokfeed built without Arrow")
    def test_columns_rename(self):
        recs = [{"conversation": r["messages"], "id": i} for i, r in enumerate(self.records) if "messages" in r]
        j = self.path("rename", "r.jsonl")
        with open(j, "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        p = self.path("rename", "r.parquet")
        pq.write_table(pa.Table.from_struct_array(pa.array(recs)), p, row_group_size=33)
        cols = 'columns = { "conversation" = "messages" }\n'
        want = Job(self.tmp, dataset(j, cols)).dump()
        self.assertGreater(len(want.splitlines()), 20)
        self.assertEqual(Job(self.tmp, dataset(p, cols)).dump(), want, "columns renames")
        # Without the rename no column holds records: named, with the columns.
        out = Job(self.tmp, dataset(p)).check()
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(p + ": no column holds records: the columns are [conversation, id]", out.stderr)

    @unittest.skipUnless(WITH_ARROW, "tokfeed built without Arrow")
    def test_bad_input(self):
        good = self.path("bad", "good.parquet")
        pq.write_table(self.table.slice(0, 200), good, row_group_size=50)
        with open(good, "rb") as f:
            raw = f.read()
        # Truncated: no footer.
        cut = self.path("bad", "cut.parquet")
        with open(cut, "wb") as f:
            f.write(raw[: len(raw) // 2])
        out = Job(self.tmp, dataset(cut)).check()
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(cut + ": cannot read it as a Parquet file", out.stderr)
        # Damaged pages of row group 2.
        meta = pq.ParquetFile(good).metadata
        rg = meta.row_group(2)
        start = min(rg.column(c).data_page_offset for c in range(rg.num_columns))
        broken = bytearray(raw)
        broken[start + 40: start + 3000] = b"\xff" * (3000 - 40)
        bad = self.path("bad", "pages.parquet")
        with open(bad, "wb") as f:
            f.write(bytes(broken))
        out = Job(self.tmp, dataset(bad)).check()
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(bad + ": row group 2 (from row 100): cannot read it", out.stderr)
        # A wrong type in a column: every row is bad, named by row group and row.
        typed = self.path("bad", "typed.parquet")
        pq.write_table(pa.table({"messages": pa.array(list(range(10)), pa.int64())}), typed)
        out = Job(self.tmp, dataset(typed).replace('"skip"', '"fail"')).check()
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(typed + ":1: bad record: row group 0, row 0: ", out.stderr)
        # A null message: under skip counted and named, under fail fatal.
        recs = [r for r in self.records if "messages" in r][:30]
        recs = [dict(r) for r in recs]
        recs[17] = {"messages": list(recs[17]["messages"][:1]) + [None] + list(recs[17]["messages"][1:])}
        nul = self.path("bad", "null.parquet")
        pq.write_table(pa.Table.from_struct_array(pa.array(recs)), nul, row_group_size=10)
        out = Job(self.tmp, dataset(nul)).check()
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("30 records, 29 valid, 1 bad", out.stdout)
        self.assertIn(nul + ":18: row group 1, row 7: ", out.stdout)
        out = Job(self.tmp, dataset(nul).replace('"skip"', '"fail"')).check()
        self.assertNotEqual(out.returncode, 0)
        self.assertIn(nul + ":18: bad record: row group 1, row 7: ", out.stderr)

    @unittest.skipUnless(WITH_ARROW, "tokfeed built without Arrow")
    def test_rows_checked_at_start_are_kept(self):
        """A second start reads the footer and the kept verdicts, not the rows."""
        p = self.path("kept", "train.parquet")
        pq.write_table(self.table, p, row_group_size=50)
        job = Job(self.tmp, dataset(p), name="kept")
        first, again = job.check(), job.check()
        for out in (first, again):
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn(f"{len(self.records)} records, {len(self.records) - 1} valid, 1 bad", out.stdout)
            self.assertIn(p + ":310: row group 6, row 9: roles must alternate user/assistant", out.stdout)
        self.assertIn("(1 of 1 shards indexed", first.stdout)
        self.assertIn("(0 of 1 shards indexed", again.stdout)

    @unittest.skipUnless(WITH_ARROW, "tokfeed built without Arrow")
    def test_rows_checked_when_read(self):
        """check_rows = "when_read": every row is a record, and a bad one is
        left out of its batch where the plan puts it, as `truncation =
        "drop"` leaves out a sample that is too long: the stream equals that
        of the JSONL whose bad record is replaced by one too long to keep."""
        when_read = 'check_rows = "when_read"\n'
        drop = "[batch]\nsize = 4\nmax_length = 512\ntruncation = \"drop\"\n"
        bad = 309  # roles must alternate (mistral)
        long_rec = {"messages": [{"role": "user", "content": "long " * 3000},
                                 {"role": "assistant", "content": "ok"}]}
        j = self.path("lazy", "same.jsonl")
        with open(j, "w", encoding="utf-8") as f:
            for i, r in enumerate(self.records):
                f.write(json.dumps(long_rec if i == bad else r, ensure_ascii=False) + "\n")
        for what, write in (("Parquet", lambda p: pq.write_table(self.table, p, row_group_size=64)),
                            ("Arrow IPC stream", lambda p: self.write_stream(p, 70))):
            p = self.path("lazy", "t.parquet" if what == "Parquet" else "t.arrow")
            write(p)
            want = self.dump_with(j, drop, "")
            got = self.dump_with(p, drop, when_read)
            self.assertGreater(len(want.splitlines()), 100)
            self.assertEqual(got, want, what + ": a bad row read in place")
            self.assertEqual(self.dump_with(p, drop, when_read, cache=False), want, what + ", no cache")
        # The bad row is named by file, record batch and row, in the log.
        with open(self.last_log) as f:
            log = f.read()
        self.assertIn(p + ":310 (record batch 4, row 29): bad record: roles must alternate user/assistant", log)
        # --check-config still checks every row and names the bad one; the
        # plan keeps it.
        out = Job(self.tmp, dataset(p, when_read)).check()
        self.assertEqual(out.returncode, 0, out.stderr)
        n = len(self.records)
        self.assertIn(f"{n} records, {n - 1} valid, 1 bad, {n} samples per epoch", out.stdout)
        self.assertIn(p + ":310: record batch 4, row 29: roles must alternate", out.stdout)
        # With on_bad_record = "fail" every row is checked at start: refused.
        out = Job(self.tmp, dataset(p, when_read).replace('"skip"', '"fail"')).check()
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("check_rows", out.stderr)

    def write_stream(self, p, rows):
        with pa.OSFile(p, "wb") as sink, pa.ipc.new_stream(sink, self.table.schema) as w:
            for b in self.table.to_batches(max_chunksize=rows):
                w.write_batch(b)

    def dump_with(self, path, batch, rest, cache=True):
        """Batches of one dataset under a [batch] table of its own."""
        job = Job(self.tmp, dataset(path, rest), cache=cache, extra="", batch=batch)
        ColumnarTest.last_log = job.config + ".log"
        return job.dump()

    @unittest.skipIf(WITH_ARROW, "tokfeed built with Arrow")
    def test_without_arrow_says_how_to_enable_it(self):
        p = self.path("noarrow", "train.parquet")
        pq.write_table(self.table.slice(0, 10), p)
        out = Job(self.tmp, dataset(p)).check()
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("built without Apache Arrow", out.stderr)
        self.assertIn("scripts/deps.sh", out.stderr)


if __name__ == "__main__":
    if pa is None:
        print(f"skipped: {IMPORT_ERROR} (set TOKFEED_HF_PYTHON to a Python with pyarrow and datasets)")
        sys.exit(77)
    unittest.main(verbosity=2)
