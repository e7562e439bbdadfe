#!/usr/bin/env python3
"""BPE encode speed, mantissa against Hugging Face tokenizers, on one core, interleaved.

    bench/peers/hf_tokenizers_encode.py BUILD/bin/mantissa_tokenizer_bench TOKENIZER TEXT [rounds]
        [GPT2_TIKTOKEN]

Each round runs mantissa_tokenizer_bench (5 timed encodes of the whole text, after a warm-up) and
then 5 timed `Tokenizer.encode` calls of the same text here, with RAYON_NUM_THREADS=1 and
TOKENIZERS_PARALLELISM=false (one encode of one text is single-threaded in tokenizers anyway).
Prints each side's median MB/s over all rounds, their ratio and the median of the per-round
ratios; checks both give the same number of tokens. With GPT2_TIKTOKEN (tiktoken's "gpt2" rank
file; TOKENIZER then GPT-2's, e.g. from bench/peers/gpt2_tokenizer_from_tiktoken.py), tiktoken's
encode_ordinary (what nanoGPT's prepare.py calls; one thread) is timed in each round too.
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
tiktoken_file = sys.argv[5] if len(sys.argv) > 5 else None
enc = None
if tiktoken_file:
    import base64

    import tiktoken

    with open(tiktoken_file) as f:
        ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in f)}
    enc = tiktoken.Encoding(
        "gpt2", mergeable_ranks=ranks, special_tokens={"<|endoftext|>": len(ranks)},
        pat_str=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
if os.path.isdir(tok_path):
    tok_path = os.path.join(tok_path, "tokenizer.json")
tok = Tokenizer.from_file(tok_path)
with open(text_path, encoding="utf-8", errors="replace") as f:
    text = f.read()
size = len(text.encode("utf-8"))
hf_tokens = len(tok.encode(text).ids)

ours, theirs, ratios, tik, tik_ratios = [], [], [], [], []
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
    if enc is not None:
        assert len(enc.encode_ordinary(text)) == r["tokens"]
        t = []
        for _ in range(5):
            t0 = time.perf_counter()
            enc.encode_ordinary(text)
            t.append(time.perf_counter() - t0)
        tik.append(statistics.median(t))
        tik_ratios.append(statistics.median(t) / m)

mb = size / 1e6
extra = {}
if tik:
    extra = {"tiktoken_MB_per_s": round(mb / statistics.median(tik), 2),
             "speedup_vs_tiktoken_median_of_rounds": round(statistics.median(tik_ratios), 2),
             "speedup_vs_tiktoken_range": [round(min(tik_ratios), 2), round(max(tik_ratios), 2)]}
print(json.dumps({
    "text_bytes": size, "tokens": hf_tokens,
    "mantissa_MB_per_s": round(mb / statistics.median(ours), 2),
    "hf_tokenizers_MB_per_s": round(mb / statistics.median(theirs), 2),
    "speedup_median_of_rounds": round(statistics.median(ratios), 2),
    "speedup_range": [round(min(ratios), 2), round(max(ratios), 2)],
    **extra,
}))
