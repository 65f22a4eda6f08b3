#!/usr/bin/env python3
"""Writes OUT_DIR/tokenizer.json: Mistral's tekken tokenizer (Mistral NeMo's
`tekken_240718.json`, shipped in the mistral-common wheel) converted to HF's
format by transformers' own converter, as `AutoTokenizer` loads such a model.

Its pre-tokenizer is a Split regex none of ../shared's tokenizers use (case
classes `\\p{Lu}\\p{Lt}...`, single digits, `[\\r\\n/]*` after punctuation),
with `ignore_merges`: the test that follows (hf_random_diff.py) holds
tokfeed's encoder to HF `tokenizers` on a tokenizer it was not built
against. Exit 77 (skip) without mistral-common or transformers.

    tekken_json.py OUT_DIR
"""
import os
import sys

try:
    import mistral_common
    from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

vocab = os.path.join(os.path.dirname(mistral_common.__file__), "data", "tekken_240718.json")
if not os.path.exists(vocab):
    print(f"skip: {vocab} is absent")
    sys.exit(77)
os.makedirs(sys.argv[1], exist_ok=True)
tok = convert_tekken_tokenizer(vocab, chat_template="")
tok.backend_tokenizer.save(os.path.join(sys.argv[1], "tokenizer.json"))
