"""examples/train_tiny.py trains on CPU from tokfeed and its loss falls."""
import os
import re
import subprocess
import sys
import unittest

from tokfeed_testlib import BUILD_DIR, SOURCE_DIR


class TrainTiny(unittest.TestCase):
    def test_loss_falls_over_50_steps(self):
        script = os.path.join(SOURCE_DIR, "examples", "train_tiny.py")
        r = subprocess.run([sys.executable, script, "--steps", "50",
                            "--tokfeedd", os.path.join(BUILD_DIR, "daemon", "tokfeedd")],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # "step  5/50 loss 9.1234  12.3 steps/s  45,678 tokens/s  ETA 4 s": progress with rate and ETA
        losses = [float(x) for x in re.findall(r"^step +\d+/50 loss ([0-9.]+)  [0-9.]+ steps/s  [0-9,]+ tokens/s  "
                                               r"ETA \d+ s$", r.stdout, re.M)]
        self.assertGreaterEqual(len(losses), 10, r.stdout)
        m = re.search(r"first_loss ([0-9.]+) last_loss ([0-9.]+)", r.stdout)
        first, last = float(m.group(1)), float(m.group(2))
        self.assertLess(last, 0.9 * first, r.stdout)


if __name__ == "__main__":
    unittest.main()
