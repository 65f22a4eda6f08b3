"""docs/migrating.md's TRL rows, against TRL itself: SFTTrainer prepares the
same records (assistant_only_loss with TRL's own training template,
max_length with truncation_mode="keep_start", fully masked examples dropped),
and the daemon, given the same template, max_length, truncation = "right"
and the default keep_untrained = false, serves the same samples in the same
order with the same input_ids and labels. Then TRL's default,
assistant_only_loss=False (every token of the conversation trained), with
Qwen2.5's own template, against the daemon's loss = "all".

Needs TOKFEED_HF_PYTHON (transformers, trl, datasets) and ../shared's
qwen2_5_training template; skips without them.
"""
import json
import os
import shutil
import tempfile
import unittest

try:
    import datasets
    import torch
    import transformers
    import trl
except ImportError:  # pragma: no cover - the Debian interpreter
    transformers = None

from tokfeed_testlib import BUILD_DIR, SOURCE_DIR, TOKFEEDCTL, TOKFEEDD

SHARED = os.path.normpath(os.path.join(SOURCE_DIR, "..", "shared"))
TRAINING = os.path.join(SHARED, "templates", "qwen2_5_training", "tokenizer_config.json")
PLAIN = os.path.join(SHARED, "templates", "Qwen-Qwen2.5-7B-Instruct", "tokenizer_config.json")
QWEN = os.path.join(BUILD_DIR, "test-data", "qwen3", "tokenizer.json")
DATA = os.path.join(SOURCE_DIR, "tests", "data", "sft", "messages-100.jsonl")
MAX_LENGTH = 160


def serve_and_dump(tmp, job_body):
    import subprocess
    import time
    import uuid

    sock = os.path.join(tmp, "d.sock")
    job = os.path.join(tmp, "job.toml")
    with open(job, "w") as f:
        f.write(job_body + f'[server]\nsocket = "{sock}"\nshm_prefix = "par-{uuid.uuid4().hex[:10]}"\n'
                f'[cache]\ndir = "{tmp}/cache"\n')
    log = open(os.path.join(tmp, "log"), "w")
    proc = subprocess.Popen([TOKFEEDD, "--config", job], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (os.path.exists(sock) and
                   subprocess.run([TOKFEEDCTL, "-s", sock, "status"], capture_output=True).returncode == 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("tokfeedd did not serve: " + open(os.path.join(tmp, "log")).read()[-2000:])
            time.sleep(0.05)
        out = subprocess.run([TOKFEEDCTL, "-s", sock, "dump"], capture_output=True, text=True, check=True).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]
    finally:
        subprocess.run([TOKFEEDCTL, "-s", sock, "shutdown"], capture_output=True)
        proc.wait(timeout=20)
        log.close()


@unittest.skipIf(transformers is None, "needs transformers and trl (run with TOKFEED_HF_PYTHON)")
@unittest.skipUnless(os.path.exists(TRAINING) and os.path.exists(QWEN), "needs ../shared/templates and qwen3")
class TrlPreparation(unittest.TestCase):
    def compare(self, template_path, assistant_only_loss, loss):
        """TRL's prepared samples against the daemon's, with the template at
        `template_path`; returns how many examples TRL dropped."""
        tmp = tempfile.mkdtemp(prefix="tokfeed-parity-")
        try:
            with open(template_path) as f:
                template = json.load(f)["chat_template"]
            tok = transformers.PreTrainedTokenizerFast(tokenizer_file=QWEN, eos_token="<|im_end|>",
                                                       pad_token="<|endoftext|>")
            tok.chat_template = template
            with open(DATA) as f:
                records = [json.loads(line) for line in f if line.strip()]
            ds = datasets.Dataset.from_list([{"messages": r["messages"]} for r in records])
            args = trl.SFTConfig(output_dir=os.path.join(tmp, "out"), report_to=[], use_cpu=True,
                                 max_length=MAX_LENGTH, assistant_only_loss=assistant_only_loss,
                                 truncation_mode="keep_start")
            cfg = transformers.Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
            trainer = trl.SFTTrainer(model=transformers.Qwen2ForCausalLM(cfg), args=args, train_dataset=ds,
                                     processing_class=tok)
            want = [(row["input_ids"], row["labels"]) for row in trainer.train_dataset]
            del trainer

            got = serve_and_dump(tmp, f"""[dataset]
path = "{DATA}"
[tokenizer]
type = "hf"
path = "{QWEN}"
template = "jinja"
chat_template = "{template_path}"
[batch]
size = 1
max_length = {MAX_LENGTH}
truncation = "right"
loss = "{loss}"
[schedule]
shuffle = false
[workers]
count = 1
""")
            got = [(b["input_ids"][0], b["labels"][0]) for b in got]
            dropped = len(records) - len(want)
            print(f"TRL kept {len(want)} of {len(records)} examples ({dropped} fully masked at max_length "
                  f"{MAX_LENGTH}); tokfeed served {len(got)}")
            self.assertEqual(len(got), len(want))
            for k, (g, w) in enumerate(zip(got, want)):
                self.assertEqual(g[0], w[0], f"sample {k}: input_ids")
                self.assertEqual(g[1], w[1], f"sample {k}: labels")
            return dropped
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_same_samples_ids_and_labels_as_sft_trainer(self):
        dropped = self.compare(TRAINING, assistant_only_loss=True, loss="all_assistant")
        self.assertGreater(dropped, 0, "the test should have fully masked examples")

    @unittest.skipUnless(os.path.exists(PLAIN), "needs ../shared/templates/Qwen-Qwen2.5-7B-Instruct")
    def test_whole_conversation_as_trl_default(self):
        # assistant_only_loss=False trains every token, the system prompt
        # Qwen2.5's template adds included: nothing is dropped.
        self.assertEqual(self.compare(PLAIN, assistant_only_loss=False, loss="all"), 0)


if __name__ == "__main__":
    unittest.main()
