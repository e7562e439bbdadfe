// GPT-2's byte-level BPE: loading Hugging Face's and OpenAI's files, encoding, decoding.
#include "runner/text/bpe_tokenizer.h"

#include <algorithm>
#include <climits>
#include <deque>
#include <filesystem>
#include <queue>

#include "engine/error.h"
#include "runner/files/atomic_file.h"
#include "runner/files/json.h"
#include "runner/files/text.h"
#include "runner/text/gpt2_pretokenizer.h"

namespace mantissa::runner {

namespace fs = std::filesystem;

namespace {

// GPT-2's byte <-> character table: the vocabulary spells each byte as one printable character,
// bytes that are printable in Latin-1 as themselves and the others as U+0100 onwards, in order.
struct ByteAlphabet {
  std::array<int32_t, 256> char_of_byte{};
  std::unordered_map<int32_t, uint8_t> byte_of_char;
  ByteAlphabet() {
    int32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      char_of_byte[b] = printable ? b : next++;
      byte_of_char[char_of_byte[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// The bytes a vocabulary entry spells (its characters through the byte table).
std::string token_bytes(std::string_view spelled, const std::string& what) {
  std::string out;
  const ByteAlphabet& a = alphabet();
  for (size_t i = 0; i < spelled.size();) {
    const Utf8Char c = utf8_char_at(spelled, i);
    MT_CHECK(c.cp >= 0, what, ": the token \"", printable_excerpt(spelled), "\" is not UTF-8");
    const auto it = a.byte_of_char.find(c.cp);
    MT_CHECK(it != a.byte_of_char.end(), what, ": the token \"", printable_excerpt(spelled),
             "\" has the character U+", std::hex, c.cp, std::dec,
             ", which spells no byte: not a byte-level BPE vocabulary");
    out += static_cast<char>(it->second);
    i += static_cast<size_t>(c.len);
  }
  return out;
}

// `key` of the JSON object `j` must be absent, null or one of `allowed` (compared as JSON text).
void refuse_unless(const JsonView& j, std::string_view key, std::vector<std::string> allowed,
                   const std::string& where, const std::string& why) {
  const auto v = j.find(key);
  if (!v || v->is_null()) return;
  const std::string text = v->dump();
  MT_CHECK(std::find(allowed.begin(), allowed.end(), text) != allowed.end(), where, ".", key,
           " is ", printable_excerpt(text), ": ", why);
}

}  // namespace

void BpeTokenizer::add_token(std::string bytes, int64_t id, const std::string& what) {
  // Ids index embedding rows: past 2^31 is no vocabulary, and (ids being int32 in merges) unsafe.
  MT_CHECK(id >= 0 && id < (int64_t{1} << 31), what, ": token id ", id, " of \"",
           printable_excerpt(bytes), "\" is out of range [0, 2^31)");
  const auto [it, inserted] = id_bytes_.emplace(static_cast<int32_t>(id), bytes);
  MT_CHECK(inserted, what, ": the tokens \"", printable_excerpt(it->second), "\" and \"",
           printable_excerpt(bytes), "\" both have id ", id);
  vocab_size_ = std::max(vocab_size_, id + 1);
  bytes_to_id_[std::move(bytes)] = static_cast<int32_t>(id);
}

void BpeTokenizer::add_merge(std::string_view left, std::string_view right, int32_t rank,
                             const std::string& what) {
  const std::string l = token_bytes(left, what), r = token_bytes(right, what);
  const auto li = bytes_to_id_.find(l), ri = bytes_to_id_.find(r), mi = bytes_to_id_.find(l + r);
  for (const auto& [it, name] : {std::pair{li, left}, std::pair{ri, right}}) {
    MT_CHECK(it != bytes_to_id_.end(), what, ": merge ", rank + 1, " (\"", printable_excerpt(left),
             "\" \"", printable_excerpt(right), "\"): \"", printable_excerpt(name),
             "\" is not in the vocabulary");
  }
  MT_CHECK(mi != bytes_to_id_.end(), what, ": merge ", rank + 1, " (\"", printable_excerpt(left),
           "\" \"", printable_excerpt(right), "\"): the merged token is not in the vocabulary");
  const uint64_t key =
      (static_cast<uint64_t>(li->second) << 32) | static_cast<uint32_t>(ri->second);
  // The rank is the place in the list; a pair listed twice keeps its later place, as Hugging
  // Face's map of merges does.
  merges_[key] = Merge{rank, mi->second};
}

void BpeTokenizer::finish(const std::string& what) {
  for (int b = 0; b < 256; ++b) {
    const auto it = bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    MT_CHECK(it != bytes_to_id_.end(), what, ": the vocabulary has no token for the byte 0x",
             std::hex, b, std::dec, ": not a byte-level BPE vocabulary");
    byte_id_[b] = it->second;
  }
  source_ = what;
}

BpeTokenizer BpeTokenizer::from_vocab_and_merges(std::string_view vocab_json,
                                                 std::string_view merges_txt,
                                                 const std::string& what) {
  BpeTokenizer t;
  const Json vocab_tree = json::parse(vocab_json, what);
  const JsonView vocab(vocab_tree);
  MT_CHECK(vocab.is_object(), what, ": vocab.json must be an object of token: id");
  for (const auto& [token, id] : vocab.members())
    t.add_token(token_bytes(token, what), id.as_int(), what);
  size_t line_no = 0;
  int32_t rank = 0;
  for (size_t at = 0; at < merges_txt.size();) {
    size_t end = merges_txt.find('\n', at);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.starts_with("#version") || line.empty()) continue;
    const size_t space = line.find(' ');
    MT_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos,
             what, ": merges.txt line ", line_no, " is not two tokens separated by a space: \"",
             printable_excerpt(line), "\"");
    MT_CHECK(rank < INT32_MAX, what, ": too many merges");
    t.add_merge(line.substr(0, space), line.substr(space + 1), rank++, what);
  }
  t.finish(what);
  return t;
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(std::string_view json_text,
                                               const std::string& what) {
  const Json tree = json::parse(json_text, what);
  const JsonView root(tree);
  MT_CHECK(root.is_object(), what, ": not a tokenizer.json (not a JSON object)");
  const std::string w = what;
  const std::string reproduce = "only GPT-2's byte-level BPE is read";
  refuse_unless(root, "normalizer", {}, w, "normalizers are not applied; " + reproduce);
  refuse_unless(root, "truncation", {}, w, "truncation is not applied");
  refuse_unless(root, "padding", {}, w, "padding is not applied");
  BpeTokenizer t;
  const auto pre = root.find("pre_tokenizer");
  MT_CHECK(pre && pre->is_object() && pre->find("type") && pre->at("type").is_string() &&
               pre->at("type").as_string() == "ByteLevel",
           what, ".pre_tokenizer must be ByteLevel (GPT-2's), got ",
           pre ? printable_excerpt(pre->dump()) : std::string("none"), "; ", reproduce);
  refuse_unless(*pre, "use_regex", {"true"}, w + ".pre_tokenizer",
                "only GPT-2's pattern is applied");
  if (const auto ps = pre->find("add_prefix_space"); ps && !ps->is_null())
    t.add_prefix_space_ = ps->as_bool();
  if (const auto post = root.find("post_processor"); post && !post->is_null()) {
    MT_CHECK(post->is_object() && post->find("type") && post->at("type").is_string() &&
                 post->at("type").as_string() == "ByteLevel",
             what, ".post_processor is ", printable_excerpt(post->dump()),
             ": only ByteLevel (which adds no tokens) is applied");
  }
  if (const auto dec = root.find("decoder"); dec && !dec->is_null()) {
    MT_CHECK(dec->is_object() && dec->find("type") && dec->at("type").is_string() &&
                 dec->at("type").as_string() == "ByteLevel",
             what, ".decoder is ", printable_excerpt(dec->dump()), ": only ByteLevel is applied");
  }
  const JsonView model = root.at("model");
  const std::string m = w + ".model";
  MT_CHECK(
      model.find("type") && model.at("type").is_string() && model.at("type").as_string() == "BPE",
      m, ".type must be BPE, got ",
      model.find("type") ? printable_excerpt(model.at("type").dump()) : std::string("none"));
  refuse_unless(model, "dropout", {"0", "0.0"}, m, "BPE dropout is random; not applied");
  refuse_unless(model, "continuing_subword_prefix", {"\"\""}, m, "not GPT-2's; not applied");
  refuse_unless(model, "end_of_word_suffix", {"\"\""}, m, "not GPT-2's; not applied");
  if (const auto im = model.find("ignore_merges"); im && !im->is_null())
    t.ignore_merges_ = im->as_bool();
  const JsonView vocab = model.at("vocab");
  MT_CHECK(vocab.is_object(), m, ".vocab must be an object of token: id");
  for (const auto& [token, id] : vocab.members())
    t.add_token(token_bytes(token, m + ".vocab"), id.as_int(), m + ".vocab");
  const JsonView merges = model.at("merges");
  MT_CHECK(merges.is_array(), m, ".merges must be a list");
  MT_CHECK(merges.size() < static_cast<size_t>(INT32_MAX), m, ".merges: too many merges");
  int32_t rank = 0;
  for (const JsonView merge : merges.elements()) {
    // "left right" (tokenizers before 0.20) or ["left", "right"].
    if (merge.is_string()) {
      const std::string& s = merge.as_string();
      const size_t space = s.find(' ');
      MT_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, m,
               ".merges[", rank, "] is not two tokens separated by a space: \"",
               printable_excerpt(s), "\"");
      t.add_merge(std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1), rank,
                  m + ".merges");
    } else {
      MT_CHECK(
          merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(), m,
          ".merges[", rank, "] is not a pair of tokens: ", printable_excerpt(merge.dump()));
      t.add_merge(merge[0].as_string(), merge[1].as_string(), rank, m + ".merges");
    }
    ++rank;
  }
  if (const auto added = root.find("added_tokens"); added && !added->is_null()) {
    MT_CHECK(added->is_array(), what, ".added_tokens must be a list");
    size_t i = 0;
    for (const JsonView a : added->elements()) {
      const std::string where = w + ".added_tokens[" + std::to_string(i++) + "]";
      for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
        refuse_unless(a, flag, {"false"}, where, "not applied");
      }
      const std::string& content = a.at("content").as_string();
      MT_CHECK(!content.empty(), where, ".content is empty");
      const int64_t id = a.at("id").as_int();
      MT_CHECK(id >= 0 && id < (int64_t{1} << 31), where, ".id ", id, " is out of range [0, 2^31)");
      bool normalized = true;
      if (const auto n = a.find("normalized"); n && !n->is_null()) normalized = n->as_bool();
      // An added token may also be a vocabulary entry (GPT-2's <|endoftext|>), with the same id
      // and text; one that would give a vocabulary text another id, or an id another text, is
      // ambiguous.
      const auto by_id = t.id_bytes_.find(static_cast<int32_t>(id));
      MT_CHECK(by_id == t.id_bytes_.end() || by_id->second == content, where, ": id ", id,
               " is the vocabulary's token \"", printable_excerpt(by_id->second), "\", not \"",
               printable_excerpt(content), "\"");
      const auto by_text = t.bytes_to_id_.find(content);
      MT_CHECK(by_text == t.bytes_to_id_.end() || by_text->second == id, where, ": \"",
               printable_excerpt(content), "\" is the vocabulary's token ", by_text->second,
               ", not ", id);
      for (const AddedToken& other : t.added_) {
        MT_CHECK(other.content != content && other.id != id, where, ": \"",
                 printable_excerpt(content), "\" (id ", id, ") is listed twice");
      }
      t.added_.push_back({content, static_cast<int32_t>(id), normalized});
      // The added token's own text, not a byte-level spelling, is what it decodes to.
      t.id_bytes_.emplace(static_cast<int32_t>(id), content);
      t.vocab_size_ = std::max(t.vocab_size_, id + 1);
    }
  }
  t.finish(what);
  return t;
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "tokenizer.json", ec)) {
      p /= "tokenizer.json";
    } else {
      MT_CHECK(fs::exists(p / "vocab.json", ec) && fs::exists(p / "merges.txt", ec), "tokenizer '",
               path, "': the folder holds neither tokenizer.json nor vocab.json + merges.txt");
      p /= "vocab.json";
    }
  }
  if (p.filename() == "vocab.json") {
    const fs::path merges = p.parent_path() / "merges.txt";
    MT_CHECK(fs::exists(merges, ec), "tokenizer '", p.string(), "': no merges.txt beside it ('",
             merges.string(), "')");
    return from_vocab_and_merges(read_file_bytes(p.string()), read_file_bytes(merges.string()),
                                 p.string());
  }
  return from_tokenizer_json(read_file_bytes(p.string()), p.string());
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const auto it = bytes_to_id_.find(std::string(piece)); it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Hugging Face's merge loop: a queue of (rank, position) with stale entries skipped, so the
  // pair merged next is always the lowest-ranked one present, the leftmost among equals.
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, id;
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;  // a min-queue
    }
  };
  // Positions are int32: a piece (one run of letters, digits or spaces) of 2 GiB is refused.
  MT_CHECK(piece.size() < static_cast<size_t>(INT32_MAX), "BpeTokenizer.encode: a piece of ",
           piece.size(), " bytes (one run of letters, digits, spaces or symbols) is too long");
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> s(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    s[i] = {byte_id_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  const auto lookup = [&](int32_t a, int32_t b) -> const Merge* {
    const auto it = merges_.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  std::priority_queue<Candidate> queue;
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const Merge* m = lookup(s[i].id, s[i + 1].id)) queue.push({m->rank, i, m->id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = s[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = s[left.next];
    const Merge* m = lookup(left.id, right.id);
    if (m == nullptr || m->id != top.id) continue;  // a pair that has since changed
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) s[right.next].prev = top.pos;
    if (left.prev >= 0)
      if (const Merge* p = lookup(s[left.prev].id, left.id))
        queue.push({p->rank, left.prev, p->id});
    if (left.next >= 0)
      if (const Merge* q = lookup(left.id, s[left.next].id)) queue.push({q->rank, top.pos, q->id});
  }
  for (int32_t i = 0; i >= 0; i = s[i].next) out.push_back(s[i].id);
}

// The pieces of one encode() call merged so far: each distinct piece (words, runs of spaces
// repeat) is merged once. Keys are views of the text being encoded, or of `prefixed`.
struct BpeTokenizer::PieceCache {
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> index;  // -> ids[first, +n)
  std::vector<int32_t> ids;
  std::deque<std::string> prefixed;  // texts given a leading space (add_prefix_space)
  // Progress over the whole text.
  const BpeTokenizer::Progress* progress = nullptr;
  const char* text_begin = nullptr;
  size_t text_size = 0;
  size_t next_report = 0;
};

void BpeTokenizer::encode_ordinary(std::string_view text, PieceCache& cache,
                                   std::vector<int64_t>& out) const {
  if (text.empty()) return;
  if (add_prefix_space_ && text.front() != ' ') {
    std::string& prefixed = cache.prefixed.emplace_back();
    prefixed.reserve(text.size() + 1);
    prefixed += ' ';
    prefixed.append(text);
    text = prefixed;
  }
  std::vector<int32_t> ids;
  // A text given a leading space is not part of the encoded text: its progress is its start's.
  const bool within =
      text.data() >= cache.text_begin && text.data() < cache.text_begin + cache.text_size;
  for_each_gpt2_piece(text, [&](std::string_view piece) {
    if (cache.progress != nullptr && within) {
      const auto done = static_cast<size_t>(piece.data() - cache.text_begin);
      if (done >= cache.next_report) {
        (*cache.progress)(done, cache.text_size);
        cache.next_report = done + (size_t{1} << 20);
      }
    }
    if (piece.size() == 1) {
      out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
      return;
    }
    if (const auto it = cache.index.find(piece); it != cache.index.end()) {
      const int32_t* first = cache.ids.data() + it->second.first;
      out.insert(out.end(), first, first + it->second.second);
      return;
    }
    ids.clear();
    encode_piece(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cache.index.size() >= (1u << 20)) {  // bounded on a corpus of endless distinct pieces
      cache.index.clear();
      cache.ids.clear();
    }
    cache.index.emplace(piece, std::pair{cache.ids.size(), ids.size()});
    cache.ids.insert(cache.ids.end(), ids.begin(), ids.end());
  });
}

// Cuts the added tokens of one kind (normalized or not) out of `text`, leftmost first and the
// longest at the same place; the text between them goes on to the next pass (the normalized
// tokens, after those that are not, as Hugging Face tokenizers splits), then to BPE.
void BpeTokenizer::split_added(std::string_view text, bool normalized, PieceCache& cache,
                               std::vector<int64_t>& out) const {
  const auto next_pass = [&](std::string_view part) {
    if (!normalized) {
      split_added(part, true, cache, out);
    } else {
      encode_ordinary(part, cache, out);
    }
  };
  // Where each token next occurs at or after `at` (npos: nowhere), found again only once passed,
  // so a corpus of many documents is searched once per token.
  std::vector<size_t> next(added_.size(), std::string_view::npos);
  for (size_t k = 0; k < added_.size(); ++k)
    if (added_[k].normalized == normalized) next[k] = text.find(added_[k].content);
  size_t at = 0;
  while (at < text.size()) {
    size_t best = std::string_view::npos;
    const AddedToken* found = nullptr;
    for (size_t k = 0; k < added_.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < at)
        next[k] = text.find(added_[k].content, at);
      if (next[k] == std::string_view::npos) continue;
      if (next[k] < best || (next[k] == best && added_[k].content.size() > found->content.size())) {
        best = next[k];
        found = &added_[k];
      }
    }
    if (found == nullptr) {
      next_pass(text.substr(at));
      return;
    }
    next_pass(text.substr(at, best - at));
    out.push_back(found->id);
    at = best + found->content.size();
  }
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text, int64_t* replaced,
                                          const Progress& progress) const {
  std::string repaired;
  if (replaced != nullptr) *replaced = 0;
  if (!is_valid_utf8(text)) {
    repaired = repair_utf8(text, replaced);
    text = repaired;
  }
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 16);
  PieceCache cache;
  if (progress) {
    cache.progress = &progress;
    cache.text_begin = text.data();
    cache.text_size = text.size();
  }
  split_added(text, /*normalized=*/false, cache, out);
  if (progress) progress(text.size(), text.size());
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    const auto it =
        id >= 0 && id < vocab_size() ? id_bytes_.find(static_cast<int32_t>(id)) : id_bytes_.end();
    MT_CHECK(it != id_bytes_.end(), "BpeTokenizer.decode: token ", id, " at position ", i,
             " is not in the vocabulary of '", source_, "'");
    out += it->second;
  }
  return out;
}

}  // namespace mantissa::runner
