"""tokfeed.Loader on CPU against tokfeedctl dump of the same daemon."""
import gc
import random
import time
import unittest

import torch

import tokfeed
from tokfeed_testlib import Daemon, as_lists, dump_tensors


class LoaderContent(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # 300 records, 13 of them with no trained token at max_length 512 (left
        # out), batch 4, 2 epochs: 72 batches per epoch, 144 in all.
        cls.d = Daemon(epochs=2, workers=2, slots=8)
        cls.dump = cls.d.dump()  # the whole stream, before any Loader attaches
        cls.bpe = 72

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def expected(self, index):
        return dump_tensors(self.dump[index])

    def test_stream_equals_dump(self):
        self.assertEqual(len(self.dump), 2 * self.bpe)
        with tokfeed.Loader(self.d.socket) as loader:
            self.assertEqual(len(loader), self.bpe)
            self.assertEqual(loader.epochs, 2)
            n = 0
            for i, batch in enumerate(loader):
                self.assertEqual(set(batch), {"input_ids", "attention_mask", "labels", "position_ids"})
                for t in batch.values():
                    self.assertEqual(t.dtype, torch.int64)
                    self.assertEqual(t.device.type, "cpu")
                self.assertEqual(as_lists(batch), self.expected(i), f"batch {i}")
                self.assertEqual(loader.state_dict(), {"epoch": (i + 1) // self.bpe, "step": (i + 1) % self.bpe, "world_size": 1, "base": 0})
                n += 1
            self.assertEqual(n, 2 * self.bpe)
            self.assertEqual(loader.state_dict(), {"epoch": 2, "step": 0, "world_size": 1, "base": 0})
            with self.assertRaises(StopIteration):
                next(loader)

    def test_zero_copy(self):
        with tokfeed.Loader(self.d.socket) as loader:
            base, size = loader.mapping_base, loader.mapping_size
            self.assertGreater(size, 0)
            for _ in range(5):
                batch = next(loader)
                for name, t in batch.items():
                    begin = t.data_ptr()
                    end = begin + t.numel() * t.element_size()
                    self.assertTrue(base <= begin and end <= base + size, f"{name} is not inside the mapping")

    def test_resume_from_state_dict(self):
        # Through an epoch boundary: positions k = 7 (mid epoch 0) and 78 (epoch 1, step 3).
        for k in (7, self.bpe + 3):
            with tokfeed.Loader(self.d.socket) as loader:
                for _ in range(k):
                    next(loader)
                state = loader.state_dict()
            self.assertEqual(state, {"epoch": k // self.bpe, "step": k % self.bpe, "world_size": 1, "base": 0})
            gc.collect()
            with tokfeed.Loader(self.d.socket) as loader:
                loader.load_state_dict(state)
                got = [as_lists(b) for b in loader]
            self.assertEqual(len(got), 2 * self.bpe - k)
            for j, g in enumerate(got):
                self.assertEqual(g, self.expected(k + j), f"resumed at {k}: batch {k + j}")

    def test_set_epoch_and_empty_state(self):
        with tokfeed.Loader(self.d.socket) as loader:
            loader.set_epoch(1)
            self.assertEqual(loader.state_dict(), {"epoch": 1, "step": 0, "world_size": 1, "base": 0})
            self.assertEqual(as_lists(next(loader)), self.expected(self.bpe))
            loader.load_state_dict({})
            self.assertEqual(as_lists(next(loader)), self.expected(0))
            # One epoch per epoch_batches(); set_epoch at its end is a no-op.
            n, last = 0, None
            for batch in loader.epoch_batches():
                n, last = n + 1, as_lists(batch)
            del batch
            self.assertEqual(n, self.bpe - 1)
            self.assertEqual(last, self.expected(self.bpe - 1))
            loader.set_epoch(1)
            self.assertEqual(as_lists(next(loader)), self.expected(self.bpe))

    def test_reposition_refused_while_batches_alive(self):
        with tokfeed.Loader(self.d.socket) as loader:
            held = next(loader)
            with self.assertRaisesRegex(tokfeed.InvalidArgument, "still alive"):
                loader.set_epoch(1)
            del held
            loader.set_epoch(1)
            self.assertEqual(as_lists(next(loader)), self.expected(self.bpe))

    def test_out_of_order_free(self):
        rng = random.Random(1234)
        with tokfeed.Loader(self.d.socket) as loader:
            held = {}  # stream index -> batch
            # 2 workers x 8 slots: at most 16 held, 8 per worker ring.
            for i in range(16):
                held[i] = next(loader)
            with self.assertRaisesRegex(tokfeed.InvalidArgument, "holds all 8 slots of worker 0"):
                next(loader)
            checked = 0
            i = 16
            while i < 100 or held:
                # Free a random subset in random order, verifying each batch
                # just before it goes (its slot neighbours were freed and
                # refilled meanwhile).
                victims = rng.sample(sorted(held), k=max(1, len(held) // 2) if i < 100 else len(held))
                rng.shuffle(victims)
                for v in victims:
                    # Tensors of one batch are also freed one at a time.
                    batch = held.pop(v)
                    self.assertEqual(as_lists(batch), self.expected(v), f"batch {v}")
                    names = list(batch)
                    rng.shuffle(names)
                    for name in names:
                        del batch[name]
                    checked += 1
                # Refill while the next batch's ring has room: a ring's 8
                # slots are a window from its oldest batch still held.
                while i < 100:
                    oldest = min((h for h in held if h % 2 == i % 2), default=i)
                    if i // 2 - oldest // 2 >= 8:
                        break
                    held[i] = next(loader)
                    i += 1
            self.assertEqual(checked, 100)
            # Everything released: the stream carries on intact.
            self.assertEqual(as_lists(next(loader)), self.expected(100))


class UserErrors(unittest.TestCase):
    """Mistakes a trainer makes must not crash it or wedge the loader."""

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(epochs=2, workers=2, slots=8)
        cls.dump = cls.d.dump()
        cls.bpe = 72

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_write_into_cpu_batch(self):
        # CPU views are copy-on-write: writes land on private pages. 40
        # batches through 2 x 8 slots: every slot is reused after a write, and
        # must then show the daemon's new batch, not the stale private page.
        with tokfeed.Loader(self.d.socket) as loader:
            for i in range(40):
                b = next(loader)
                self.assertEqual(as_lists(b), dump_tensors(self.dump[i]), f"batch {i}")
                b["input_ids"][0, 0] = 5
                b["labels"] += 1
                b["attention_mask"].masked_fill_(b["attention_mask"] == 0, 7)
                self.assertEqual(int(b["input_ids"][0, 0]), 5)
                self.assertEqual(b["labels"].tolist(), [[x + 1 for x in r] for r in self.dump[i]["labels"]])
                del b
        # The stream is unchanged for the next client of the rank.
        self.assertEqual(self.d.dump(count=3), self.dump[:3])

    def test_live_batch_error_names_its_position(self):
        with tokfeed.Loader(self.d.socket) as loader:
            held = None
            for i in range(6):
                b = next(loader)
                if i == 3:
                    held = b
            del b
            with self.assertRaisesRegex(tokfeed.InvalidArgument, r"1 batch\(es\) still alive \(epoch 0 step 3\)"):
                loader.set_epoch(1)
            del held
            loader.set_epoch(1)
            self.assertEqual(as_lists(next(loader)), dump_tensors(self.dump[self.bpe]))

    def test_failed_load_state_dict_leaves_loader_usable(self):
        with tokfeed.Loader(self.d.socket) as loader:
            for _ in range(5):
                next(loader)
            with self.assertRaisesRegex(tokfeed.InvalidArgument, "past"):
                loader.load_state_dict({"epoch": 9, "step": 0})
            self.assertEqual(as_lists(next(loader)), dump_tensors(self.dump[5]))
            with self.assertRaisesRegex(tokfeed.InvalidArgument, "expected a dict"):
                loader.load_state_dict("epoch 1")
            self.assertEqual(as_lists(next(loader)), dump_tensors(self.dump[6]))
            self.assertEqual(loader.state_dict()["step"], 7)

    @unittest.skipIf(torch.cuda.is_available(), "a CUDA device is present")
    def test_cuda_device_count_without_device_is_zero(self):
        self.assertEqual(tokfeed._tokfeed.cuda_device_count(), 0)
        self.assertRegex(tokfeed._tokfeed.cuda_status(), "^no CUDA device: ")


class LoaderErrors(unittest.TestCase):
    def test_daemon_lost_within_2s(self):
        d = Daemon(epochs=1)
        try:
            loader = tokfeed.Loader(d.socket, liveness_timeout=1.5)
            next(loader)
            d.kill9()
            t0 = time.monotonic()
            with self.assertRaises(tokfeed.DaemonLost):
                for _ in loader:  # batches already in the rings may still come first
                    self.assertLess(time.monotonic() - t0, 2.0)
            self.assertLess(time.monotonic() - t0, 2.0)
            self.assertTrue(issubclass(tokfeed.DaemonLost, tokfeed.TokfeedError))
        finally:
            d.stop()

    def test_connect_errors(self):
        with self.assertRaises(tokfeed.IoError):
            tokfeed.Loader("/nonexistent/tokfeed.sock")
        with Daemon(epochs=1) as d:
            with self.assertRaisesRegex(tokfeed.RefusedError, "rank 3 is not served"):
                tokfeed.Loader(d.socket, rank=3)
            with self.assertRaisesRegex(tokfeed.InvalidArgument, "past"):
                tokfeed.Loader(d.socket).load_state_dict({"epoch": 5, "step": 0, "world_size": 1, "base": 0})

    def test_bad_device(self):
        with self.assertRaises(tokfeed.InvalidArgument):
            tokfeed.Loader("/unused.sock", device="mps")

    @unittest.skipIf(torch.cuda.is_available(), "a CUDA device is present")
    def test_cuda_without_device_is_a_clear_error(self):
        # Raised at construction, before any connection is attempted.
        with self.assertRaisesRegex(tokfeed.TokfeedError, "^no CUDA device: "):
            tokfeed.Loader("/unused.sock", device="cuda")
        with self.assertRaisesRegex(tokfeed.TokfeedError, "^no CUDA device: "):
            tokfeed.Loader("/unused.sock", device="cuda:1")


if __name__ == "__main__":
    unittest.main()
