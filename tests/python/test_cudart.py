"""The binding links no CUDA library and loads the CUDA runtime at run time
(client/src/cudart_dlopen.cpp): torch's when torch loaded one, else
libcudart.so.N from the library path, else TOKFEED_CUDART. Runs without a GPU:
each case in a fresh interpreter, since the runtime is looked up once."""
import glob
import os
import subprocess
import sys
import unittest

import tokfeed

PKG = os.path.dirname(tokfeed.__file__)


def run(code, **env):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, **env))
    if r.returncode:
        raise AssertionError(r.stderr)
    return r.stdout.strip()


class Cudart(unittest.TestCase):
    def test_the_extension_links_no_cuda_and_no_torch(self):
        so = glob.glob(os.path.join(PKG, "_tokfeed*.so"))[0]
        needed = subprocess.run(["ldd", so], capture_output=True, text=True, check=True).stdout
        for lib in ("libcudart", "libcuda.so", "libtorch", "libc10"):
            self.assertNotIn(lib, needed)

    def test_a_runtime_that_cannot_be_loaded_is_named(self):
        out = run("import tokfeed._tokfeed as t; print(t.cuda_device_count(), t.cuda_status())",
                  TOKFEED_CUDART="/nonexistent/libcudart.so.12")
        self.assertEqual(out.split()[0], "0")
        self.assertIn("no CUDA device: no CUDA runtime: TOKFEED_CUDART=/nonexistent/libcudart.so.12", out)

    def test_torchs_runtime_is_the_one_used(self):
        code = """
import torch, tokfeed._tokfeed as t
before = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libcudart.so' in l})
status = t.cuda_status()
after = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libcudart.so' in l})
print(repr((before, after, status)))
"""
        before, after, status = eval(run(code))
        if not before:
            self.skipTest("this torch loads no CUDA runtime")
        self.assertEqual(after, before, "the binding loaded a second libcudart")
        self.assertTrue(status == "" or "cudaError" in status, status)  # the runtime's own answer


if __name__ == "__main__":
    unittest.main()
