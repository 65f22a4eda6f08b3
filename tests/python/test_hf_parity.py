"""docs/migrating.md's TRL rows, against TRL itself: SFTTrainer prepares the
same records (assistant_only_loss with TRL's own training template,
max_length with truncation_mode="keep_start", fully masked examples dropped),
and the daemon, given the same template, max_length, truncation = "right"
and the default keep_untrained = false, serves the same samples in the same
order with the same input_ids and labels. Then TRL's default,
assistant_only_loss=False (every token of the conversation trained), with
Qwen2.5's own template, against the daemon's loss = "all". Then TRL's
standard datasets, `text` and string `prompt`/`completion`, against the
daemon's formats "text" and "prompt_completion" (docs/data_model.md 1.3),
and TRL's conversational prompt/completion records under Qwen2.5's template,
with three tokenizers as transformers loads them: Qwen3's (no special tokens
added), Llama-3's with its real post-processor (<|begin_of_text|> before),
and sp32k's tokenizer.json (LlamaTokenizer: <s> before).

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


def served_samples(tmp, head, loss):
    """(input_ids, labels) of each sample the daemon serves in file order,
    one per batch, for a job of `head` (its [dataset] and [tokenizer]) with
    the parity settings: max_length MAX_LENGTH, right truncation, `loss`."""
    batches = serve_and_dump(tmp, head + f"""[batch]
size = 1
max_length = {MAX_LENGTH}
truncation = "right"
loss = "{loss}"
[schedule]
shuffle = false
[workers]
count = 1
""")
    return [(b["input_ids"][0], b["labels"][0]) for b in batches]


def assert_same_samples(test, got, want, what):
    test.assertEqual(len(got), len(want), what)
    for k, (g, w) in enumerate(zip(got, want)):
        test.assertEqual(g[0], w[0], f"{what} sample {k}: input_ids")
        test.assertEqual(g[1], w[1], f"{what} sample {k}: labels")


@unittest.skipIf(transformers is None, "needs transformers and trl (run with TOKFEED_HF_PYTHON)")
@unittest.skipUnless(os.path.exists(TRAINING) and os.path.exists(QWEN), "needs ../shared/templates and qwen3")
class TrlPreparation(unittest.TestCase):
    def compare(self, template_path, assistant_only_loss, loss, prompt_completion=False, completion_only_loss=None):
        """TRL's prepared samples against the daemon's, with the template at
        `template_path`; returns how many examples TRL dropped.
        `prompt_completion`: each conversation as a conversational
        prompt/completion record (its last message the completion)."""
        tmp = tempfile.mkdtemp(prefix="tokfeed-parity-")
        try:
            with open(template_path) as f:
                template = json.load(f)["chat_template"]
            tok = transformers.PreTrainedTokenizerFast(tokenizer_file=QWEN, eos_token="<|im_end|>",
                                                       pad_token="<|endoftext|>")
            tok.chat_template = template
            with open(DATA) as f:
                records = [json.loads(line) for line in f if line.strip()]
            rows = [{"messages": r["messages"]} for r in records]
            data = DATA
            if prompt_completion:
                rows = [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in rows]
                data = os.path.join(tmp, "data.jsonl")
                with open(data, "w") as f:
                    for r in rows:
                        f.write(json.dumps(r) + "\n")
            ds = datasets.Dataset.from_list(rows)
            args = trl.SFTConfig(output_dir=os.path.join(tmp, "out"), report_to=[], use_cpu=True,
                                 max_length=MAX_LENGTH, assistant_only_loss=assistant_only_loss,
                                 truncation_mode="keep_start", completion_only_loss=completion_only_loss)
            cfg = transformers.Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
            trainer = trl.SFTTrainer(model=transformers.Qwen2ForCausalLM(cfg), args=args, train_dataset=ds,
                                     processing_class=tok)
            want = [(row["input_ids"], row["labels"]) for row in trainer.train_dataset]
            del trainer

            got = served_samples(tmp, f"""[dataset]
path = "{data}"
[tokenizer]
type = "hf"
path = "{QWEN}"
template = "jinja"
chat_template = "{template_path}"
""", loss)
            dropped = len(records) - len(want)
            print(f"TRL kept {len(want)} of {len(records)} examples ({dropped} fully masked at max_length "
                  f"{MAX_LENGTH}); tokfeed served {len(got)}")
            assert_same_samples(self, got, want, os.path.basename(os.path.dirname(template_path)))
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

    @unittest.skipUnless(os.path.exists(PLAIN), "needs ../shared/templates/Qwen-Qwen2.5-7B-Instruct")
    def test_conversational_prompt_completion(self):
        # TRL's conversational prompt/completion: the completion's tokens
        # past apply_chat_template(prompt, add_generation_prompt=True)'s.
        self.compare(PLAIN, assistant_only_loss=False, loss="all_assistant", prompt_completion=True)
        self.assertEqual(self.compare(PLAIN, assistant_only_loss=False, loss="all", prompt_completion=True,
                                      completion_only_loss=False), 0)


def plain_records(kind):
    """TRL standard records made from messages-100.jsonl: `text` (the turns
    joined), or prompt/completion (a user turn, its answer), with the edges
    that matter: a text or completion already ending with the eos text, a
    prompt ending in spaces (its tokens end differently alone), an empty
    prompt, a completion that starts without a space."""
    with open(DATA) as f:
        convs = [[m["content"] for m in json.loads(line)["messages"]] for line in f if line.strip()]
    out = []
    for k, turns in enumerate(convs):
        if kind == "text":
            text = "\n\n".join(turns)
            if k % 9 == 4:
                text += "{eos}"
            out.append({"text": text})
            continue
        prompt, completion = turns[-2], turns[-1]
        if k % 5 == 1:
            prompt += "  "
        # An empty prompt, where the whole text does not start with a space:
        # transformers' LlamaTokenizer class rebuilds sp32k's pipeline, which
        # then differs from its tokenizer.json (docs/data_model.md 1.3).
        if k % 11 == 3 and not completion[:1].isspace():
            prompt = ""
        if k % 7 == 2 and prompt:
            completion = " " + completion
        if k % 9 == 4:
            completion += "{eos}"
        out.append({"prompt": prompt, "completion": completion})
    return out


@unittest.skipIf(transformers is None, "needs transformers and trl (run with TOKFEED_HF_PYTHON)")
@unittest.skipUnless(os.path.isdir(os.path.join(SHARED, "tokenizers")), "needs ../shared/tokenizers")
class TrlStandardDatasets(unittest.TestCase):
    """SFTTrainer's preparation of `text` and `prompt`/`completion` records
    against the daemon's plain-text formats, sample by sample."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tokfeed-plain-")
        cls.dirs = {}
        for name in ("qwen3", "llama3", "sp32k"):
            src = os.path.join(SHARED, "tokenizers", name)
            dst = os.path.join(cls.tmp, name)
            os.makedirs(dst)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(src, f), dst)
            cls.dirs[name] = dst
        # Llama-3's tokenizer.json as Meta ships it: BOS through a
        # TemplateProcessing after ByteLevel (../shared's keeps ByteLevel only).
        path = os.path.join(cls.dirs["llama3"], "tokenizer.json")
        with open(path) as f:
            t = json.load(f)
        bos = "<|begin_of_text|>"
        bos_id = next(a["id"] for a in t["added_tokens"] if a["content"] == bos)
        t["post_processor"] = {"type": "Sequence", "processors": [
            t["post_processor"],
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}]}
        with open(path, "w") as f:
            json.dump(t, f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def compare(self, name, kind, loss="all_assistant", completion_only_loss=None):
        tok = transformers.AutoTokenizer.from_pretrained(self.dirs[name])
        records = [{k: v.replace("{eos}", tok.eos_token) for k, v in r.items()} for r in plain_records(kind)]
        tmp = tempfile.mkdtemp(prefix="tokfeed-plain-job-", dir=self.tmp)
        data = os.path.join(tmp, "data.jsonl")
        with open(data, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        args = trl.SFTConfig(output_dir=os.path.join(tmp, "out"), report_to=[], use_cpu=True, max_length=MAX_LENGTH,
                             truncation_mode="keep_start", completion_only_loss=completion_only_loss)
        cfg = transformers.Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
        trainer = trl.SFTTrainer(model=transformers.Qwen2ForCausalLM(cfg), args=args,
                                 train_dataset=datasets.Dataset.from_list(records), processing_class=tok)
        want = [(row["input_ids"], row["labels"]) for row in trainer.train_dataset]
        del trainer
        got = served_samples(tmp, f"""[dataset]
path = "{data}"
format = "{'text' if kind == 'text' else 'prompt_completion'}"
[tokenizer]
type = "hf"
path = "{self.dirs[name]}/tokenizer.json"
template = "chatml"
""", loss)
        print(f"{name} {kind} loss={loss}: TRL kept {len(want)} of {len(records)}; tokfeed served {len(got)}")
        assert_same_samples(self, got, want, f"{name} {kind}")
        return want

    def test_text(self):
        for name in ("qwen3", "llama3", "sp32k"):
            want = self.compare(name, "text")
            starts = {ids[0] for ids, _ in want}
            if name != "qwen3":  # the post-processor's BOS leads every sample
                self.assertEqual(len(starts), 1, name)

    def test_prompt_completion(self):
        for name in ("qwen3", "llama3", "sp32k"):
            want = self.compare(name, "prompt_completion")
            # The prompt trains nothing: a leading BOS always belongs to it.
            self.assertTrue(all(labels[0] == -100 for _, labels in want) or name == "qwen3", name)
            self.assertGreater(sum(labels[0] == -100 for _, labels in want), len(want) // 2, name)

    def test_prompt_completion_all_trained(self):
        # TRL's completion_only_loss=False: the prompt trains too.
        want = self.compare("llama3", "prompt_completion", loss="all", completion_only_loss=False)
        self.assertTrue(all(labels == ids for ids, labels in want))


if __name__ == "__main__":
    unittest.main()
