#!/usr/bin/env python3
"""BPE encode speed, mantissa against Hugging Face tokenizers, on one core, interleaved.

    bench/peers/hf_tokenizers_encode.py BUILD/bin/mantissa_tokenizer_bench TOKENIZER TEXT [rounds]

Each round runs mantissa_tokenizer_bench (5 timed encodes of the whole text, after a warm-up) and
then 5 timed `Tokenizer.encode` calls of the same text here, with RAYON_NUM_THREADS=1 and
TOKENIZERS_PARALLELISM=false (one encode of one text is single-threaded in tokenizers anyway).
Prints each side's median MB/s over all rounds, their ratio and the median of the per-round
ratios; checks both give the same number of tokens.
"""
import json
import os
import statistics
import subprocess
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402  (after the thread settings)

bench, tok_path, text_path = sys.argv[1:4]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 7
if os.path.isdir(tok_path):
    tok_path = os.path.join(tok_path, "tokenizer.json")
tok = Tokenizer.from_file(tok_path)
with open(text_path, encoding="utf-8", errors="replace") as f:
    text = f.read()
size = len(text.encode("utf-8"))
hf_tokens = len(tok.encode(text).ids)

ours, theirs, ratios = [], [], []
for _ in range(rounds):
    out = subprocess.run(["taskset", "-c", "0", bench, tok_path, text_path, "5"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    assert r["tokens"] == hf_tokens, (r["tokens"], hf_tokens)
    m = statistics.median(r["seconds"])
    h = []
    for _ in range(5):
        t0 = time.perf_counter()
        tok.encode(text)
        h.append(time.perf_counter() - t0)
    hm = statistics.median(h)
    ours.append(m)
    theirs.append(hm)
    ratios.append(hm / m)

mb = size / 1e6
print(json.dumps({
    "text_bytes": size, "tokens": hf_tokens,
    "mantissa_MB_per_s": round(mb / statistics.median(ours), 2),
    "hf_tokenizers_MB_per_s": round(mb / statistics.median(theirs), 2),
    "speedup_median_of_rounds": round(statistics.median(ratios), 2),
    "speedup_range": [round(min(ratios), 2), round(max(ratios), 2)],
}))
