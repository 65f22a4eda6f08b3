"""A cold start through tokfeed.Loader (docs/data_model.md 4.1): with the
default rules the daemon serves while its token cache builds; the batch
counts arrive after attach, len() blocks until they do, and the epochs'
batches equal a warm run's. The test-only hook TOKFEED_FAULT_BUILD_RECORD_US
slows each record's build."""
import os
import shutil
import tempfile
import time
import unittest

import tokfeed
from tokfeed_testlib import Daemon, as_lists

Loader = tokfeed.Loader  # imports torch now, not while a daemon builds
SLOW = {"TOKFEED_FAULT_BUILD_RECORD_US": "30000"}  # 300 records over 2 builders: about 4.5 s


def job(cache):
    return dict(batch_size=4, epochs=2, workers=2, max_length=256, truncation="drop",
                extra=f'[cache]\ndir = "{cache}"\n')


def epochs(loader, n):
    return [[as_lists(b) for b in loader.epoch_batches()] for _ in range(n)]


class Cold(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tokfeed-cold-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_epochs_while_building_equal_warm(self):
        cache = os.path.join(self.dir, "cache")
        d = Daemon(env=SLOW, **job(cache))
        try:
            with Loader(d.socket) as loader:
                gen = loader.epoch_batches()
                first = as_lists(next(gen))
                # Served before the daemon knows the batch counts.
                self.assertFalse(d.status()["ranks"][0]["counts_known"])
                cold = [[first] + [as_lists(b) for b in gen]]
                cold += epochs(loader, 1)
                self.assertEqual(loader.state_dict()["epoch"], 2)
        finally:
            d.stop()
        self.assertTrue(cold[0] and cold[1])
        warm = Daemon(**job(cache))
        try:
            with Loader(warm.socket) as loader:
                self.assertEqual(len(loader), len(cold[0]))
                self.assertEqual(epochs(loader, 2), cold)
            self.assertIn("reused in", warm.read_log())
        finally:
            warm.stop()

    def test_len_blocks_until_the_counts_are_known(self):
        d = Daemon(env=SLOW, **job(os.path.join(self.dir, "cache")))
        try:
            with Loader(d.socket) as loader:
                self.assertFalse(d.status()["ranks"][0]["counts_known"])
                t0 = time.monotonic()
                n = len(loader)
                waited = time.monotonic() - t0
                st = d.status()
                self.assertTrue(st["ranks"][0]["counts_known"])
                self.assertNotEqual(st["cache"]["state"], "building")
                self.assertEqual(st["ranks"][0]["batches_per_epoch"], n)
                self.assertGreater(waited, 0.1)
                self.assertEqual(sum(1 for _ in loader.epoch_batches()), n)
        finally:
            d.stop()

    def test_eval_job_trains_while_building_and_evaluates_once_built(self):
        # [eval]: the training stream is served while the cache builds; an
        # evaluation loader opened meanwhile waits for the build's end, and
        # both equal a warm run's.
        cache = os.path.join(self.dir, "cache")
        cfg = job(cache)
        cfg["extra"] += "[eval]\nsplit_ratio = 0.1\nbatch_size = 3\n"
        d = Daemon(env=SLOW, **cfg)
        try:
            with Loader(d.socket) as loader:
                gen = loader.epoch_batches()
                first = as_lists(next(gen))
                st = d.status()
                self.assertFalse(st["ranks"][0]["counts_known"])
                self.assertEqual(st["cache"]["state"], "building")
                self.assertEqual({w["state"] for w in st["workers"] if w["split"] == "eval"}, {"waiting"})
                # Its attach is retried until the build ends.
                with Loader(d.socket, split="eval") as ev:
                    self.assertNotEqual(d.status()["cache"]["state"], "building")
                    passes = [as_lists(b) for b in ev.epoch_batches()]
                train = [first] + [as_lists(b) for b in gen]
        finally:
            d.stop()
        self.assertTrue(train and passes)
        warm = Daemon(**cfg)
        try:
            with Loader(warm.socket) as loader:
                self.assertEqual([as_lists(b) for b in loader.epoch_batches()], train)
            with Loader(warm.socket, split="eval") as ev:
                self.assertEqual([as_lists(b) for b in ev.epoch_batches()], passes)
        finally:
            warm.stop()


if __name__ == "__main__":
    unittest.main()
