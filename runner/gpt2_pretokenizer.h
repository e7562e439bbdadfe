// GPT-2's pre-tokenization: text cut into the pieces that byte-level BPE then encodes one by one,
// as GPT-2's pattern
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// cuts it (Hugging Face tokenizers' ByteLevel pre-tokenizer and OpenAI's encoder). The pattern is
// applied by hand, alternative by alternative, over code points classified by ICU (letters L*,
// numbers N*, Unicode White_Space), instead of by a regex engine: this is the whole of the work
// of encoding a text that is not a cache hit, and the hand-written form is the faster one
// (bench/tokenizer_bench.cpp).
//
//   runner::for_each_gpt2_piece("Hello  world's", [](std::string_view piece) { ... });
//   // "Hello", " ", " world", "'s"
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace mantissa::runner {

// `text` with each ill-formed UTF-8 sequence replaced by U+FFFD, one per maximal subpart (the
// Unicode standard's recommended practice; Python's errors="replace" and Rust's from_utf8_lossy).
// `replaced` counts the replacements. Well-formed text is returned unchanged.
std::string repair_utf8(std::string_view text, int64_t* replaced = nullptr);

// True when `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

// Calls `piece` for each piece of `text`, in order; the pieces concatenate to `text`. `text` must
// be well-formed UTF-8 (repair_utf8); an ill-formed byte is taken as a character of its own class
// "other".
void for_each_gpt2_piece(std::string_view text, const std::function<void(std::string_view)>& piece);

}  // namespace mantissa::runner
