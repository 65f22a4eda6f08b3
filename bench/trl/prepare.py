#!/usr/bin/env python3
"""TRL's standard datasets, prepared: what a trainer waits for before its
first step. TRL's SFTTrainer (load_dataset("json"), then its preparation:
add EOS, tokenize, labels, truncate) against tokfeed serving the same file
with format "text" or "prompt_completion" (docs/data_model.md 1.3), in one
run, each in a fresh process on a cache neither has seen.

    $TOKFEED_HF_PYTHON bench/trl/prepare.py [--records 10000] [--kind text|prompt_completion]
        [--tokenizer ../shared/tokenizers/qwen3] [--build build] [--num-proc 2] [--work DIR]

- Records: the conversations of ../shared/data/sft/mixed-10k.jsonl (10,000;
  past that they repeat, and a tokenizer's word cache has seen their words),
  each given a leading "Record N.": `text` is the turns joined by blank
  lines; `prompt` all turns but the last, `completion` the last.
- TRL: a fresh interpreter imports transformers and trl (untimed), then the
  clock runs from load_dataset("json", ...) (a new HF_DATASETS_CACHE) to
  SFTTrainer(...) returning, with max_length 2048, dataset_num_proc
  --num-proc, a 1-layer model: the prepared train_dataset.
- tokfeed: tokfeedd started on an empty cache dir with --num-proc workers;
  the clock runs from its start until `tokfeedctl status` says the batch
  counts are known, i.e. every record is tokenized into the token store.
Prints both times and their ratio, and each side's tokens as a check that
both prepared the same data.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "..", "shared", "data", "sft", "mixed-10k.jsonl")

TRL_SNIPPET = r"""
import json, os, sys, time
import datasets, transformers, trl
data, tok_dir, out, num_proc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = transformers.AutoTokenizer.from_pretrained(tok_dir)
cfg = transformers.Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                               num_attention_heads=2, num_key_value_heads=1)
model = transformers.Qwen2ForCausalLM(cfg)
datasets.disable_progress_bars()
t0 = time.perf_counter()
ds = datasets.load_dataset("json", data_files=data, split="train")
args = trl.SFTConfig(output_dir=out, report_to=[], use_cpu=True, max_length=2048, dataset_num_proc=num_proc)
trainer = trl.SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
seconds = time.perf_counter() - t0
tokens = sum(len(r) for r in trainer.train_dataset["input_ids"])
print(json.dumps({"seconds": seconds, "samples": len(trainer.train_dataset), "tokens": tokens}))
"""


def make_data(n, kind, path):
    convs = []
    with open(SOURCE) as f:
        for line in f:
            rec = json.loads(line)
            turns = rec.get("messages") or rec.get("conversations")
            if turns:
                convs.append([t.get("content", t.get("value", "")) for t in turns])
            elif "instruction" in rec:
                convs.append([rec["instruction"] + ("\n" + rec["input"] if rec.get("input") else ""), rec["output"]])
            elif "query" in rec:
                convs.append([rec["query"], rec["response"]])
    with open(path, "w") as f:
        for i in range(n):
            turns = convs[i % len(convs)]
            head = f"Record {i}. "
            if kind == "text":
                rec = {"text": head + "\n\n".join(turns)}
            else:
                rec = {"prompt": head + "\n\n".join(turns[:-1]), "completion": turns[-1]}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def run_trl(data, tok_dir, work, num_proc):
    env = dict(os.environ, HF_DATASETS_CACHE=tempfile.mkdtemp(dir=work, prefix="hf-cache-"))
    out = subprocess.run([sys.executable, "-c", TRL_SNIPPET, data, tok_dir, os.path.join(work, "trl-out"),
                          str(num_proc)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError("TRL failed: " + out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_tokfeed(build, data, tok_dir, kind, work, num_proc):
    tokfeedd = os.path.join(build, "daemon", "tokfeedd")
    tokfeedctl = os.path.join(build, "tools", "tokfeedctl")
    sock = os.path.join(work, "d.sock")
    cfg = os.path.join(work, "job.toml")
    with open(cfg, "w") as f:
        f.write(f"""[dataset]
path = "{data}"
format = "{kind}"
[tokenizer]
type = "hf"
path = "{tok_dir}/tokenizer.json"
template = "chatml"
[batch]
size = 8
max_length = 2048
[schedule]
shuffle = false
[workers]
count = {num_proc}
[cache]
dir = "{tempfile.mkdtemp(dir=work, prefix='tokfeed-cache-')}"
[server]
socket = "{sock}"
shm_prefix = "trl-bench-{os.getpid()}"
""")
    log = open(cfg + ".log", "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen([tokfeedd, "--config", cfg], stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError("tokfeedd exited: " + open(log.name).read()[-3000:])
            st = subprocess.run([tokfeedctl, "-s", sock, "status", "--json"], capture_output=True, text=True)
            if st.returncode == 0:
                status = json.loads(st.stdout)
                if status["ranks"][0]["counts_known"]:
                    seconds = time.perf_counter() - t0
                    break
            time.sleep(0.05)
        ds = status["dataset"]
        return {"seconds": seconds, "tokens": status["cache"]["tokens"], "build": status["cache"]["seconds"],
                "samples": ds["samples_per_epoch"] - ds["untrained"] - ds["too_long"], "status": status}
    finally:
        subprocess.run([tokfeedctl, "-s", sock, "shutdown"], capture_output=True)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--kind", choices=("text", "prompt_completion"), default="text")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "..", "shared", "tokenizers", "qwen3"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--num-proc", type=int, default=2)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="tokfeed-trl-bench-")
    os.makedirs(work, exist_ok=True)
    try:
        data = os.path.join(work, f"{a.kind}.jsonl")
        make_data(a.records, a.kind, data)
        tok_dir = os.path.abspath(a.tokenizer)
        trl_r = run_trl(data, tok_dir, work, a.num_proc)
        tf = run_tokfeed(os.path.abspath(a.build), data, tok_dir, a.kind, work, a.num_proc)
        print(f"{a.kind}, {a.records} records, {os.path.basename(tok_dir)}, {a.num_proc} processes each")
        print(f"TRL SFTTrainer preparation: {trl_r['seconds']:.2f} s ({trl_r['samples']} samples, "
              f"{trl_r['tokens']} tokens)")
        print(f"tokfeed, all samples tokenized: {tf['seconds']:.2f} s from the daemon's start ({tf['samples']} samples "
              f"kept; {tf['tokens']} tokens before truncation, the kept ones' and the dropped ones'; the token store "
              f"itself {tf['build']:.2f} s)")
        print(f"TRL / tokfeed: {trl_r['seconds'] / tf['seconds']:.1f}x")
        with open(os.path.join(work, "status.json"), "w") as f:
            json.dump(tf["status"], f)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
