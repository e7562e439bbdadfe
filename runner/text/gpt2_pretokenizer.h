// GPT-2's pre-tokenization: text cut into the pieces that byte-level BPE then encodes one by one,
// as GPT-2's pattern
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// cuts it (Hugging Face tokenizers' ByteLevel pre-tokenizer and OpenAI's encoder). The pattern is
// applied by hand, alternative by alternative, instead of by a regex engine: it is most of the
// work of encoding text, and bench/tokenizer_bench.cpp measures the whole encoder at about 18
// times Hugging Face's speed. Code points are classified (letters L*, numbers N*, White_Space) by
// Unicode 16.0, the version of the regex engine in Hugging Face tokenizers 0.23, from the table
// runner/text/unicode_classes.inc (scripts/unicode/make_unicode_classes.py); the system's ICU would
// be another Unicode version and classify thousands of code points differently.
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

// The character of `text` starting at byte i: its code point and length in bytes; an ill-formed
// byte is {-1, 1}.
struct Utf8Char {
  int32_t cp;
  int len;
};
Utf8Char utf8_char_at(std::string_view text, size_t i);

// Calls `piece` for each piece of `text`, in order; the pieces concatenate to `text`. `text` must
// be well-formed UTF-8 (repair_utf8); an ill-formed byte is taken as a character of its own class
// "other".
void for_each_gpt2_piece(std::string_view text, const std::function<void(std::string_view)>& piece);

}  // namespace mantissa::runner
