// GPT-2's pre-tokenization pattern, applied by hand (see the header).
#include "runner/text/gpt2_pretokenizer.h"

#include <vector>

namespace mantissa::runner {

namespace {

enum Class : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct ClassRange {
  uint32_t first, last;
  Class cls;
};

// The class of every code point (1.1 MB, built once from the ranges).
const std::vector<uint8_t>& class_table() {
  static const std::vector<uint8_t> table = [] {
    static constexpr ClassRange kRanges[] = {
#include "runner/text/unicode_classes.inc"
    };
    std::vector<uint8_t> t(0x110000, kOther);
    for (const ClassRange& r : kRanges)
      for (uint32_t c = r.first; c <= r.last; ++c) t[c] = r.cls;
    return t;
  }();
  return table;
}

bool continuation(unsigned char b) { return (b & 0xc0) == 0x80; }

// The length of the well-formed sequence starting at text[i] (Unicode's Table 3-7), or the number
// of bytes of its maximal subpart when it is ill-formed, negated (-1 for a byte that begins no
// sequence).
int sequence_length(std::string_view text, size_t i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    need = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    need = 3;
    if (b0 == 0xe0) lo = 0xa0;
    if (b0 == 0xed) hi = 0x9f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    need = 4;
    if (b0 == 0xf0) lo = 0x90;
    if (b0 == 0xf4) hi = 0x8f;
  } else {
    return -1;
  }
  for (int k = 1; k < need; ++k) {
    if (i + k >= text.size()) return -k;
    const auto b = static_cast<unsigned char>(text[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : continuation(b);
    if (!ok) return -k;
  }
  return need;
}

// utf8_char_at, inlined into the pre-tokenizer's loop: an exported function of a shared library
// is called through the PLT there, which bench/tokenizer_bench.cpp measures as a loss of speed.
Utf8Char char_at(std::string_view text, size_t i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) return {b0, 1};
  const int n = sequence_length(text, i);
  if (n < 0) return {-1, 1};
  int32_t cp = b0 & (0x7f >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
  return {cp, n};
}

}  // namespace

Utf8Char utf8_char_at(std::string_view text, size_t i) { return char_at(text, i); }

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const int n = sequence_length(text, i);
    if (n < 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

std::string repair_utf8(std::string_view text, int64_t* replaced) {
  int64_t count = 0;
  std::string out;
  if (is_valid_utf8(text)) {
    out.assign(text);
  } else {
    out.reserve(text.size() + 16);
    for (size_t i = 0; i < text.size();) {
      const int n = sequence_length(text, i);
      if (n > 0) {
        out.append(text.substr(i, static_cast<size_t>(n)));
        i += static_cast<size_t>(n);
      } else {
        out += "\xef\xbf\xbd";  // U+FFFD
        ++count;
        i += static_cast<size_t>(-n);
      }
    }
  }
  if (replaced != nullptr) *replaced = count;
  return out;
}

void for_each_gpt2_piece(std::string_view text,
                         const std::function<void(std::string_view)>& piece) {
  const std::vector<uint8_t>& classes = class_table();
  const auto class_of = [&](const Utf8Char& c) -> uint8_t {
    return c.cp < 0 ? uint8_t{kOther} : classes[static_cast<size_t>(c.cp)];
  };
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const char c0 = text[i];
    // 's 't 're 've 'm 'll 'd
    if (c0 == '\'' && i + 1 < n) {
      const char a = text[i + 1];
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        piece(text.substr(i, 2));
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const char b = text[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          piece(text.substr(i, 3));
          i += 3;
          continue;
        }
      }
    }
    const Utf8Char first = char_at(text, i);
    uint8_t cls = class_of(first);
    size_t j = i + static_cast<size_t>(first.len);
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : an optional space, then a run of one class.
    if (c0 == ' ' && j < n) {
      const Utf8Char second = char_at(text, j);
      const uint8_t next = class_of(second);
      if (next != kSpace) {
        cls = next;
        j += static_cast<size_t>(second.len);
      }
    }
    if (cls != kSpace) {
      while (j < n) {
        const Utf8Char c = char_at(text, j);
        if (class_of(c) != cls) break;
        j += static_cast<size_t>(c.len);
      }
      piece(text.substr(i, j - i));
      i = j;
      continue;
    }
    // \s+(?!\S) | \s+ : a run of white space, less its last character when something other than
    // white space follows it and that leaves at least one.
    size_t last = i;
    while (j < n) {
      const Utf8Char c = char_at(text, j);
      if (class_of(c) != kSpace) break;
      last = j;
      j += static_cast<size_t>(c.len);
    }
    const size_t end = (j < n && last > i) ? last : j;
    piece(text.substr(i, end - i));
    i = end;
  }
}

}  // namespace mantissa::runner
