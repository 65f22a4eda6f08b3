"""device="cuda:N": device batches equal the host stream. Skips without a GPU."""
import gc
import unittest

import torch

import tokfeed
from tokfeed_testlib import Daemon, as_lists, dump_tensors


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
class CudaLoader(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(epochs=2, workers=2, slots=8)
        cls.dump = cls.d.dump()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_device_batches_equal_dump(self):
        with tokfeed.Loader(self.d.socket, device="cuda:0", prefetch=2) as loader:
            n = 0
            for i, batch in enumerate(loader):
                for t in batch.values():
                    self.assertEqual(t.device, torch.device("cuda", 0))
                self.assertEqual(as_lists(batch), dump_tensors(self.dump[i]), f"batch {i}")
                n += 1
            self.assertEqual(n, len(self.dump))
            # Buffers are reused: a handful, not one per step.
            self.assertLessEqual(loader._stream.pool_buffers if loader._stream else 0, 8)

    def test_held_device_batches_stay_intact(self):
        with tokfeed.Loader(self.d.socket, device="cuda:0", prefetch=3) as loader:
            held = [next(loader) for _ in range(20)]  # more than the host rings hold
            torch.cuda.synchronize()
            for i, b in enumerate(held):
                self.assertEqual(as_lists(b), dump_tensors(self.dump[i]))

    def test_resume_on_device(self):
        with tokfeed.Loader(self.d.socket, device="cuda:0") as loader:
            for _ in range(10):
                next(loader)
            state = loader.state_dict()
        gc.collect()
        self.assertEqual(state, {"epoch": 0, "step": 10})
        with tokfeed.Loader(self.d.socket, device="cuda:0") as loader:
            loader.load_state_dict(state)
            self.assertEqual(as_lists(next(loader)), dump_tensors(self.dump[10]))


if __name__ == "__main__":
    unittest.main()
