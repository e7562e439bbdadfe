#!/usr/bin/env python3
"""GPT-2's tokenizer in Hugging Face's and OpenAI's file forms, from a tiktoken rank file, for
the tokenizer benchmark and parity checks on a GPT-2-sized vocabulary (docs/performance.md,
"Tokenizer") where GPT-2's own files cannot be downloaded.

    gpt2_tokenizer_from_tiktoken.py GPT2_TIKTOKEN OUT_DIR

GPT2_TIKTOKEN is tiktoken's "gpt2" encoding, base64 token and rank per line (PyPI's
openai-whisper source package ships it as whisper/assets/gpt2.tiktoken). Writes OUT_DIR/vocab.json
and merges.txt (GPT-2's original form: each merge is the pair byte-level BPE joins to make a
token, found by encoding the token with the lower ranks only) and OUT_DIR/tokenizer.json (built by
`tokenizers`, with <|endoftext|> as id 50256). "Hello world" encodes to GPT-2's [15496, 995].
"""
import base64
import json
import os
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
ranks = {}
with open(src) as f:
    for line in f:
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)

# GPT-2's byte <-> character table.
printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
             list(range(ord("®"), ord("ÿ") + 1)))
char_of = {b: chr(b) for b in printable}
n = 0
for b in range(256):
    if b not in char_of:
        char_of[b] = chr(256 + n)
        n += 1


def spelled(token):
    return "".join(char_of[b] for b in token)


def split_of(token, max_rank):
    parts = [bytes([b]) for b in token]
    while True:
        best, best_rank = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best_rank is None or best_rank >= max_rank:
            return parts
        parts = parts[:best] + [parts[best] + parts[best + 1]] + parts[best + 2:]


vocab, merges = {}, []
for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
    vocab[spelled(token)] = rank
    if len(token) > 1:
        left, right = split_of(token, rank)
        merges.append((spelled(left), spelled(right)))
vocab["<|endoftext|>"] = len(ranks)
with open(os.path.join(out, "vocab.json"), "w") as f:
    json.dump(vocab, f, ensure_ascii=False)
with open(os.path.join(out, "merges.txt"), "w") as f:
    f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=True)])
tok.save(os.path.join(out, "tokenizer.json"))
print(len(vocab), "tokens,", len(merges), "merges; Hello world ->", tok.encode("Hello world").ids)
