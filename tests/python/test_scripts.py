"""The HF-stack venv is current PyPI: no pin below transformers 5 or torch 2,
no Debian torch; the example installer is scripts/venv.sh."""
import os
import re
import subprocess
import unittest

from tokfeed_testlib import SOURCE_DIR

REQ = os.path.join(SOURCE_DIR, "python", "requirements-hf.txt")
INSTALL = os.path.join(SOURCE_DIR, "scripts", "install-hf-example.sh")
VENV = os.path.join(SOURCE_DIR, "scripts", "venv.sh")


def requirements():
    out = {}
    with open(REQ) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                m = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", line)
                out[m.group(1).lower()] = m.group(2)
    return out


class Scripts(unittest.TestCase):
    def test_requirements_are_current(self):
        req = requirements()
        for name in ("torch", "transformers", "trl", "accelerate", "datasets", "pyarrow", "tokenizers", "jinja2",
                     "moto", "boto3", "fastokens", "gigatoken"):
            self.assertIn(name, req, f"{name} missing from {REQ}")
        for name, spec in req.items():
            self.assertNotRegex(spec, r"<|==|~=", f"{name}{spec}: no upper bound or exact pin")
        self.assertRegex(req["transformers"], r">=\s*5")
        self.assertRegex(req["torch"], r">=\s*2")

    def test_example_installer_is_the_venv(self):
        with open(INSTALL) as f:
            text = f.read()
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        self.assertIn("venv.sh", code)
        self.assertNotRegex(code, r"system-site-packages|transformers[<>=]|/usr/bin/python3")
        for script in (INSTALL, VENV):
            r = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
