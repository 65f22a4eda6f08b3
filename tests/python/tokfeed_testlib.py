"""Shared by the Python tests: a private daemon per test, and dump parsing.

Paths come from the environment ctest sets (tests/python/CMakeLists.txt):
TOKFEED_BUILD_DIR (where daemon/tokfeedd and tools/tokfeedctl are) and
TOKFEED_SOURCE_DIR; PYTHONPATH points at the build tree's python/.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

SOURCE_DIR = os.environ.get("TOKFEED_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("TOKFEED_BUILD_DIR", "/tmp/b")
TOKFEEDD = os.path.join(BUILD_DIR, "daemon", "tokfeedd")
TOKFEEDCTL = os.path.join(BUILD_DIR, "tools", "tokfeedctl")
DATA = os.path.join(SOURCE_DIR, "tests", "data", "sft", "mixed-300.jsonl")
SP_MODEL = os.path.join(SOURCE_DIR, "tests", "data", "tokenizers", "sp32k", "tokenizer.model")


def job_toml(socket, shm_prefix, *, batch_size=4, max_length=512, epochs=1, workers=2, slots=8,
             shuffle=True, seed=42, dataset=DATA, tokenizer=SP_MODEL, heartbeat_ms=100, padding="longest",
             world_size=1, extra="", truncation="right", keep_untrained=False, tokens=None):
    return f"""
[dataset]
path = "{dataset}"
format = "auto"
on_bad_record = "skip"

[tokenizer]
type = "sentencepiece"
path = "{tokenizer}"
template = "mistral"

[batch]
size = {batch_size}
max_length = {max_length}
padding = "{padding}"
truncation = "{truncation}"
keep_untrained = {"true" if keep_untrained else "false"}
{f"tokens = {tokens}" if tokens else ""}

[schedule]
epochs = {epochs}
shuffle = {"true" if shuffle else "false"}
seed = {seed}

[workers]
count = {workers}
slots = {slots}

[ranks]
world_size = {world_size}

[server]
socket = "{socket}"
shm_prefix = "{shm_prefix}"
heartbeat_ms = {heartbeat_ms}
{extra}"""


class Daemon:
    """A tokfeedd with its own socket and shm prefix in a temp dir."""

    def __init__(self, env=None, **job):
        self.dir = tempfile.mkdtemp(prefix="tokfeed-py-")
        tag = uuid.uuid4().hex[:10]
        self.socket = os.path.join(self.dir, "d.sock")
        self.config = os.path.join(self.dir, "job.toml")
        with open(self.config, "w") as f:
            f.write(job_toml(self.socket, f"pyt-{tag}", **job))
        self.log = open(os.path.join(self.dir, "tokfeedd.log"), "w")
        self.proc = subprocess.Popen([TOKFEEDD, "--config", self.config], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **(env or {})))
        self._wait_ready()

    def _wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tokfeedd exited with {self.proc.returncode}: {self.read_log()}")
            if os.path.exists(self.socket):
                r = subprocess.run([TOKFEEDCTL, "-s", self.socket, "status"], capture_output=True)
                if r.returncode == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("tokfeedd did not become ready: " + self.read_log())

    def read_log(self):
        with open(os.path.join(self.dir, "tokfeedd.log")) as f:
            return f.read()

    def dump(self, rank=0, count=None, epoch=None, step=None, split="train"):
        """The batches `tokfeedctl dump` prints, as dicts of nested lists.

        dump attaches as the rank itself: no Loader may be attached meanwhile."""
        cmd = [TOKFEEDCTL, "-s", self.socket, "dump", "--rank", str(rank), "--split", split]
        if count is not None:
            cmd += ["--count", str(count)]
        if epoch is not None:
            cmd += ["--epoch", str(epoch), "--step", str(step or 0)]
        out = None
        for _ in range(50):  # the previous client's detach is asynchronous
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode == 0:
                out = r.stdout
                break
            if "already attached" not in r.stderr:
                raise RuntimeError(f"dump failed: {r.stderr}")
            time.sleep(0.05)
        if out is None:
            raise RuntimeError("dump: rank stayed attached")
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def status(self):
        r = subprocess.run([TOKFEEDCTL, "-s", self.socket, "status", "--json"], capture_output=True, text=True,
                           check=True)
        return json.loads(r.stdout)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            subprocess.run([TOKFEEDCTL, "-s", self.socket, "shutdown"], capture_output=True)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


TENSORS = ("input_ids", "attention_mask", "labels", "position_ids")


def as_lists(batch):
    """A Loader batch (dict of tensors) as dump's nested lists."""
    return {name: batch[name].cpu().tolist() for name in TENSORS}


def dump_tensors(d):
    return {name: d[name] for name in TENSORS}
