"""The evaluation stream ([eval], docs/data_model.md section 7) through
tokfeed.Loader: held-out records never trained on and delivered once per
pass over the ranks, passes identical, the training stream unmoved."""
import collections
import math
import unittest

import tokfeed
from tokfeed_testlib import Daemon, as_lists

SPLIT = "[eval]\nsplit_ratio = 0.05\nbatch_size = 3\n"


def rows(batch):
    """Each row's tokens without padding: a sample's identity."""
    ids, mask = batch["input_ids"].tolist(), batch["attention_mask"].tolist()
    return [tuple(t for t, m in zip(r, mk) if m) for r, mk in zip(ids, mask)]


def epoch_rows(socket, rank):
    with tokfeed.Loader(socket, rank) as loader:
        return [r for b in loader.epoch_batches() for r in rows(b)]


def pass_rows(socket, rank):
    with tokfeed.Loader(socket, rank, split="eval") as loader:
        return [r for b in loader for r in rows(b)]


class HeldOut(unittest.TestCase):
    """split_ratio = 0.05 over two ranks, against the same job without it."""

    @classmethod
    def setUpClass(cls):
        job = dict(batch_size=2, workers=2, slots=4, world_size=2, shuffle=True, seed=11)
        cls.d = Daemon(extra=SPLIT, **job)
        cls.full = Daemon(**job)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        cls.full.stop()

    def test_disjoint_and_exactly_once(self):
        ev = [pass_rows(self.d.socket, r) for r in (0, 1)]
        ev_all = ev[0] + ev[1]
        valid = self.d.status()["dataset"]["valid"]  # serving: indexed
        held = max(1, math.floor(valid * 0.05))
        # Each kept held-out sample exactly once over the ranks, none twice.
        self.assertEqual(len(set(ev_all)), len(ev_all))
        self.assertLessEqual(len(ev_all), held)
        self.assertLessEqual(abs(len(ev[0]) - len(ev[1])), 1)
        train = set(epoch_rows(self.d.socket, 0)) | set(epoch_rows(self.d.socket, 1))
        full = set(epoch_rows(self.full.socket, 0)) | set(epoch_rows(self.full.socket, 1))
        # Samples with no trained token (or too long under "drop") are left
        # out of evaluation passes as of every epoch (docs/data_model.md 4.1,
        # 7): "exactly once" is over the held-out samples that are kept.
        fs = self.full.status()["dataset"]  # serving: the counts are known
        left_out = fs["too_long"] + fs["untrained"]
        self.assertEqual(len(full), valid - left_out, "records must be distinct for this test to identify them")
        self.assertFalse(train & set(ev_all), "training saw a held-out record")
        self.assertEqual(train | set(ev_all), full)
        self.assertEqual(len(train) + len(ev_all), valid - left_out)
        self.assertGreaterEqual(len(train), valid - held - left_out)
        st = self.d.status()
        self.assertEqual(st["dataset"]["eval_samples"], held)
        self.assertEqual({r["split"] for r in st["ranks"]}, {"train", "eval"})


class Passes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(batch_size=4, workers=2, slots=4, epochs=2, extra=SPLIT + "workers = 2\n")
        cls.train = cls.d.dump()  # the training stream straight through
        cls.evald = cls.d.dump(split="eval")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_passes_identical_and_equal_to_dump(self):
        with tokfeed.Loader(self.d.socket, split="eval") as loader:
            self.assertEqual(len(loader), len(self.evald))
            for p in range(3):
                got = [as_lists(b) for b in loader]
                self.assertEqual(got, [{k: b[k] for k in got[0]} for b in self.evald], f"pass {p}")
                self.assertEqual(loader.state_dict()["epoch"], p + 1)
            # A pass left part way: the next iteration is a whole pass again.
            it = iter(loader)
            next(it)
            del it
            self.assertEqual(len([as_lists(b) for b in loader]), len(self.evald))

    def test_training_unmoved_by_evaluations(self):
        got = []
        with tokfeed.Loader(self.d.socket) as train, tokfeed.Loader(self.d.socket, split="eval") as ev:
            for i, batch in enumerate(train):
                got.append(as_lists(batch))
                del batch
                if i % 40 == 5:
                    before = train.state_dict()
                    n = sum(1 for _ in ev)
                    self.assertEqual(n, len(self.evald))
                    self.assertEqual(train.state_dict(), before)
        want = [{k: b[k] for k in got[0]} for b in self.train]
        self.assertEqual(len(got), len(want))
        self.assertEqual(got, want)

    def test_status_shows_both_streams(self):
        with tokfeed.Loader(self.d.socket, split="eval") as ev:
            next(iter(ev))
            st = self.d.status()
            ranks = {r["split"]: r for r in st["ranks"]}
            self.assertTrue(ranks["eval"]["attached"])
            self.assertFalse(ranks["train"]["attached"])
            self.assertEqual(ranks["eval"]["batches_per_epoch"], len(self.evald))
            self.assertIn("eval", {w["split"] for w in st["workers"]})

    def test_bad_split(self):
        with self.assertRaises(tokfeed.InvalidArgument):
            tokfeed.Loader(self.d.socket, split="test")


class NoEval(unittest.TestCase):
    def test_eval_refused_without_eval_table(self):
        with Daemon(workers=1, slots=2) as d:
            with self.assertRaises(tokfeed.RefusedError) as e:
                tokfeed.Loader(d.socket, split="eval")
            self.assertIn("[eval]", str(e.exception))


if __name__ == "__main__":
    unittest.main()
