// GPT-2 byte-level BPE against Hugging Face tokenizers:
// scripts/fixtures/make_bpe_tokenizer_fixture.py trained tests/data/bpe/ (tokenizer.json,
// vocab.json + merges.txt, a variant with add_prefix_space and ignore_merges) and wrote the ids
// `tokenizers` gives for hostile text (invalid UTF-8, combining marks, runs of spaces, emoji, every
// kind of Unicode space), a sweep over all of Unicode, and the bundled Shakespeare with nanoGPT's
// 90/10 split. Ids must be identical.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/error.h"
#include "json_doc.h"
#include "runner/files/atomic_file.h"
#include "runner/text/bpe_tokenizer.h"
#include "runner/text/gpt2_pretokenizer.h"
#include "runner/text/prepare_tokens.h"
#include "temp_dir.h"
#include "test_util.h"

namespace mt = mantissa;
namespace rn = mantissa::runner;
namespace fs = std::filesystem;

namespace {

std::string source(const std::string& rel) {
  const char* root = std::getenv("MANTISSA_SOURCE_DIR");
  return std::string(root ? root : ".") + "/" + rel;
}

std::string fixture(const std::string& name) { return source("tests/data/bpe/" + name); }

const JsonDoc& expected() {
  static const JsonDoc doc(rn::read_file_bytes(fixture("expected.json")), "expected.json");
  return doc;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<int64_t> ids_of(const rn::JsonView& list) {
  std::vector<int64_t> out;
  for (const rn::JsonView v : list.elements()) out.push_back(v.as_int());
  return out;
}

// FNV-1a 64 over the ids as little-endian uint32, as the fixture script hashes them.
std::string fnv1a64(const std::vector<int64_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const int64_t id : ids) {
    for (int k = 0; k < 4; ++k) {
      h ^= (static_cast<uint64_t>(id) >> (8 * k)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// Where two id lists first differ, for a readable failure.
std::string first_difference(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  std::ostringstream os;
  os << "first difference at " << i << " of " << a.size() << " / " << b.size();
  return os.str();
}

void expect_cases(const rn::BpeTokenizer& tok, const char* field) {
  for (const rn::JsonView c : expected().at("cases").elements()) {
    const std::string text = from_hex(c.at("hex").as_string());
    const std::vector<int64_t> want = ids_of(c.at(field));
    const std::vector<int64_t> got = tok.encode(text);
    EXPECT_EQ(got, want) << c.at("name").as_string() << " (" << field
                         << "): " << first_difference(got, want);
  }
}

// The fixture's tokenizer.json after `edit`, read as "tok.json", is refused with an error holding
// every one of `parts`.
template <typename Edit>
void refused(Edit edit, const std::vector<std::string>& parts) {
  static const rn::Json base = rn::json::parse(rn::read_file_bytes(fixture("tokenizer.json")));
  rn::Json spec = base;
  edit(spec);
  mt::testing::expect_error(
      [&] { rn::BpeTokenizer::from_tokenizer_json(rn::json::dump(spec), "tok.json"); }, parts);
}

}  // namespace

TEST(BpeTokenizer, HostileTextGivesHuggingFaceIds) {
  expect_cases(rn::BpeTokenizer::load(fixture("tokenizer.json")), "ids");
}

TEST(BpeTokenizer, VocabAndMergesFilesGiveHuggingFaceIds) {
  // The folder holds tokenizer.json too, which load() prefers: name vocab.json itself.
  const auto tok = rn::BpeTokenizer::load(fixture("vocab.json"));
  expect_cases(tok, "ids_vocab_merges");
  EXPECT_EQ(tok.vocab_size(), 1024);
}

TEST(BpeTokenizer, PrefixSpaceAndIgnoreMergesGiveHuggingFaceIds) {
  expect_cases(rn::BpeTokenizer::load(fixture("tokenizer_prefix_space.json")), "ids_prefix_space");
}

TEST(BpeTokenizer, FolderLoadsItsTokenizerJson) {
  const auto tok = rn::BpeTokenizer::load(source("tests/data/bpe"));
  EXPECT_EQ(tok.source(), (fs::path(source("tests/data/bpe")) / "tokenizer.json").string());
  expect_cases(tok, "ids");
}

TEST(BpeTokenizer, MergesWrittenAsStringsReadAsPairs) {
  // tokenizers before 0.20 wrote each merge as "left right".
  rn::Json spec = rn::json::parse(rn::read_file_bytes(fixture("tokenizer.json")));
  for (auto& m : spec["model"]["merges"]) {
    ASSERT_TRUE(m.is_array());
    m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  }
  expect_cases(rn::BpeTokenizer::from_tokenizer_json(rn::json::dump(spec), "strings"), "ids");
}

TEST(BpeTokenizer, DecodeGivesTheTextBack) {
  const auto tok = rn::BpeTokenizer::load(fixture("tokenizer.json"));
  for (const rn::JsonView c : expected().at("cases").elements()) {
    const std::string want = from_hex(c.at("decoded_hex").as_string());
    EXPECT_EQ(tok.decode(ids_of(c.at("ids"))), want) << c.at("name").as_string();
    // Well-formed text comes back byte for byte; ill-formed text as read (U+FFFD).
    EXPECT_EQ(tok.decode(tok.encode(from_hex(c.at("hex").as_string()))), want);
  }
  mt::testing::expect_error(
      [&] {
        tok.decode({5, 1024});
      },
      {"token 1024 at position 1", "not in the vocabulary"});
  mt::testing::expect_error([&] { tok.decode({-1}); }, {"token -1 at position 0"});
}

TEST(BpeTokenizer, SweepOverAllOfUnicodeGivesHuggingFaceIds) {
  const auto tok = rn::BpeTokenizer::load(fixture("tokenizer.json"));
  const rn::JsonView sweep = expected().at("sweep");
  const auto step = static_cast<uint32_t>(sweep.at("step").as_int());
  const auto chunk = static_cast<size_t>(sweep.at("chunk").as_int());
  std::vector<uint32_t> cps;
  for (uint32_t c = 0; c < 0x110000; c += step)
    if (c < 0xd800 || c > 0xdfff) cps.push_back(c);
  const rn::JsonView hashes = sweep.at("fnv1a64");
  ASSERT_EQ(hashes.size(), (cps.size() + chunk - 1) / chunk);
  for (size_t k = 0; k < hashes.size(); ++k) {
    std::string text;
    for (size_t i = k * chunk; i < std::min(cps.size(), (k + 1) * chunk); ++i) {
      // "{c} {c}{c}a{c}1 {c}\n", as the fixture script builds it.
      const uint32_t c = cps[i];
      append_utf8(text, c);
      text += ' ';
      append_utf8(text, c);
      append_utf8(text, c);
      text += 'a';
      append_utf8(text, c);
      text += "1 ";
      append_utf8(text, c);
      text += '\n';
    }
    EXPECT_EQ(fnv1a64(tok.encode(text)), hashes[k].as_string())
        << "code points from U+" << std::hex << cps[k * chunk];
  }
}

TEST(BpeTokenizer, BundledTextAndItsSplitGiveHuggingFaceIds) {
  const auto tok = rn::BpeTokenizer::load(fixture("tokenizer.json"));
  const std::string text = rn::read_file_bytes(source("data/shakespeare/input.txt"));
  const rn::JsonView b = expected().at("bundled");
  const std::vector<int64_t> all = tok.encode(text);
  EXPECT_EQ(static_cast<int64_t>(all.size()), b.at("all").at("tokens").as_int());
  EXPECT_EQ(fnv1a64(all), b.at("all").at("fnv1a64").as_string());
  size_t calls = 0, last = 0;
  const rn::TrainValTokens split =
      rn::tokenize_train_val(text, tok, 0.1, [&](size_t done, size_t total) {
        ++calls;
        EXPECT_GE(done, last);
        EXPECT_EQ(total, text.size());
        last = done;
      });
  EXPECT_EQ(static_cast<int64_t>(split.train.size()), b.at("train").at("tokens").as_int());
  EXPECT_EQ(fnv1a64(split.train), b.at("train").at("fnv1a64").as_string());
  EXPECT_EQ(static_cast<int64_t>(split.val.size()), b.at("val").at("tokens").as_int());
  EXPECT_EQ(fnv1a64(split.val), b.at("val").at("fnv1a64").as_string());
  EXPECT_EQ(split.replaced, 0);
  EXPECT_GE(calls, 2u);
  EXPECT_EQ(last, text.size());
}

TEST(BpeTokenizer, Uint16TokenBytesAreLittleEndianAndRefuseLargeIds) {
  EXPECT_EQ(rn::uint16_token_bytes({1, 258, 65535}, "t"),
            std::string("\x01\x00\x02\x01\xff\xff", 6));
  mt::testing::expect_error(
      [] {
        rn::uint16_token_bytes({3, 65536}, "train.bin");
      },
      {"train.bin", "65536 at position 1", "uint16"});
}

TEST(BpeTokenizer, RepairUtf8ReplacesEachMaximalSubpart) {
  int64_t n = 0;
  // A surrogate's encoding: three bad bytes (ED is a lead byte, A0 is not allowed after it).
  EXPECT_EQ(rn::repair_utf8("a\xed\xa0\x80z", &n), "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz");
  EXPECT_EQ(n, 3);
  // A truncated three-byte sequence is one maximal subpart.
  EXPECT_EQ(rn::repair_utf8("\xe2\x82 ", &n), "\xef\xbf\xbd ");
  EXPECT_EQ(n, 1);
  EXPECT_EQ(rn::repair_utf8("ok \xc3\xa9", &n), "ok \xc3\xa9");
  EXPECT_EQ(n, 0);
  EXPECT_FALSE(rn::is_valid_utf8("\xf4\x90\x80\x80"));
  EXPECT_TRUE(rn::is_valid_utf8("\xf4\x8f\xbf\xbf"));
}

TEST(BpeTokenizer, PiecesFollowGpt2Pattern) {
  std::vector<std::string> pieces;
  rn::for_each_gpt2_piece("Hello  world's 42x\t\t y   ",
                          [&](std::string_view p) { pieces.emplace_back(p); });
  const std::vector<std::string> want = {"Hello", " ",    " world", "'s", " 42",
                                         "x",     "\t\t", " y",     "   "};
  EXPECT_EQ(pieces, want);
}

TEST(BpeTokenizer, RefusesTokenizersItWouldNotReproduce) {
  refused([](rn::Json& s) { s["normalizer"] = {{"type", "NFC"}}; }, {"tok.json.normalizer", "NFC"});
  refused([](rn::Json& s) { s["model"]["type"] = "WordPiece"; }, {"tok.json.model.type", "BPE"});
  refused([](rn::Json& s) { s["model"]["dropout"] = 0.1; }, {"tok.json.model.dropout"});
  refused(
      [](rn::Json& s) {
        s["pre_tokenizer"] = {{"type", "Whitespace"}};
      },
      {"tok.json.pre_tokenizer", "ByteLevel"});
  refused([](rn::Json& s) { s["pre_tokenizer"]["use_regex"] = false; }, {"use_regex"});
  refused(
      [](rn::Json& s) {
        s["post_processor"] = {{"type", "TemplateProcessing"}};
      },
      {"tok.json.post_processor", "TemplateProcessing"});
  refused([](rn::Json& s) { s["added_tokens"][0]["lstrip"] = true; },
          {"tok.json.added_tokens[0].lstrip"});
  refused(
      [](rn::Json& s) {
        s["model"]["merges"].push_back({"zzzq", "x"});
      },
      {"tok.json.model.merges", "\"zzzq\" is not in the vocabulary"});
  refused([](rn::Json& s) { s["model"]["vocab"].erase("\xc4\x80"); },  // "Ā": the byte 0x0
          {"tok.json", "no token for the byte 0x0"});
  refused([](rn::Json& s) { s["model"]["vocab"]["\xe2\x82\xac"] = 5000; },  // "€" spells no byte
          {"tok.json.model.vocab", "spells no byte"});
  mt::testing::expect_error([] { rn::BpeTokenizer::from_tokenizer_json("[1", "x.json"); },
                            {"x.json"});
}

TEST(BpeTokenizer, LoadNamesWhatIsMissing) {
  mt::testing::TempDir dir;
  mt::testing::expect_error([&] { rn::BpeTokenizer::load(dir.path.string()); },
                            {"neither tokenizer.json nor vocab.json + merges.txt"});
  const std::string vocab = dir.file("vocab.json", "{}");
  mt::testing::expect_error([&] { rn::BpeTokenizer::load(vocab); }, {"no merges.txt beside it"});
  dir.file("merges.txt", "#version: 0.2\na\n");
  mt::testing::expect_error([&] { rn::BpeTokenizer::load(vocab); },
                            {"merges.txt line 2", "two tokens"});
}

TEST(BpeTokenizer, AddedTokensAreFoundLeftmostThenLongest) {
  rn::Json spec = rn::json::parse(rn::read_file_bytes(fixture("tokenizer.json")));
  spec["added_tokens"].push_back({{"id", 1024},
                                  {"content", "<|end"},
                                  {"single_word", false},
                                  {"lstrip", false},
                                  {"rstrip", false},
                                  {"normalized", true},
                                  {"special", true}});
  const auto tok = rn::BpeTokenizer::from_tokenizer_json(rn::json::dump(spec), "t");
  EXPECT_EQ(tok.vocab_size(), 1025);
  const auto ids = tok.encode("x<|endoftext|>y<|endz");
  // <|endoftext|> (id 0) is longer than <|end at the same place; "<|endz" holds only <|end.
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[1], 0);
  EXPECT_EQ(ids[3], 1024);
  EXPECT_EQ(tok.decode(ids), "x<|endoftext|>y<|endz");
}

// Every code point is a letter, number, white space or other as tokenizers' pre-tokenizer sees it
// (its regex engine is Unicode 16.0; an older character database, as Debian 12's ICU 72, differs
// on 5004 code points). Probed as the fixture script probes tokenizers: from where the pieces of
// "a" + c, "1" + c and "!" + c are cut.
TEST(BpeTokenizer, EveryCodePointIsClassifiedAsTokenizersClassifiesIt) {
  const JsonDoc doc(rn::read_file_bytes(fixture("hf_code_point_classes.json")));
  const rn::JsonView runs = doc.at("runs");
  const auto one_piece = [](const std::string& s) {
    int n = 0;
    rn::for_each_gpt2_piece(s, [&](std::string_view) { ++n; });
    return n == 1;
  };
  size_t run = 0, mismatches = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    while (run + 1 < runs.size() && static_cast<uint32_t>(runs[run + 1][0].as_int()) <= cp) ++run;
    if (cp >= 0xd800 && cp <= 0xdfff) continue;  // not text
    const int64_t want = runs[run][1].as_int();
    std::string c;
    append_utf8(c, cp);
    const int64_t got = one_piece("a" + c)   ? 1
                        : one_piece("1" + c) ? 2
                        : one_piece("!" + c) ? 0
                                             : 3;
    if (got != want && ++mismatches <= 10)
      ADD_FAILURE() << "U+" << std::hex << cp << ": class " << got << ", tokenizers' " << want;
  }
  EXPECT_EQ(mismatches, 0u);
}

// Merges listed twice (a pair's rank is its last place in the list) and added tokens of both kinds
// (those with normalized false are cut out first), as the fixture script edits tokenizer.json.
TEST(BpeTokenizer, RepeatedMergesAndBothKindsOfAddedTokensGiveHuggingFaceIds) {
  rn::Json spec = rn::json::parse(rn::read_file_bytes(fixture("tokenizer.json")));
  auto& merges = spec["model"]["merges"];
  merges.insert(merges.begin() + 50, rn::Json(merges[5]));
  merges.insert(merges.begin() + 200, rn::Json(merges[120]));
  const auto added = [](int id, const char* content, bool normalized) {
    return rn::Json{{"id", id},        {"content", content}, {"single_word", false},
                    {"lstrip", false}, {"rstrip", false},    {"normalized", normalized},
                    {"special", false}};
  };
  spec["added_tokens"].push_back(added(1024, "abc", false));
  spec["added_tokens"].push_back(added(1025, "xab", true));
  const auto tok = rn::BpeTokenizer::from_tokenizer_json(rn::json::dump(spec), "variant");
  for (const rn::JsonView v : expected().at("variant").elements()) {
    const std::vector<int64_t> want = ids_of(v.at("ids"));
    const std::vector<int64_t> got = tok.encode(v.at("text").as_string());
    EXPECT_EQ(got, want) << first_difference(got, want);
  }
}

TEST(BpeTokenizer, RefusesAmbiguousIds) {
  refused([](rn::Json& s) { s["model"]["vocab"]["zzz"] = 5; }, {"both have id 5"});
  refused([](rn::Json& s) { s["model"]["vocab"]["zzz"] = int64_t{1} << 32; },
          {"token id 4294967296", "out of range"});
  refused([](rn::Json& s) { s["added_tokens"][0]["id"] = 5; },
          {"tok.json.added_tokens[0]", "id 5 is the vocabulary's token"});
  refused(
      [](rn::Json& s) {
        s["added_tokens"].push_back(s["added_tokens"][0]);
        s["added_tokens"][1]["id"] = 2000;
      },
      {"tok.json.added_tokens[1]", "is the vocabulary's token 0, not 2000"});
  refused([](rn::Json& s) { s["added_tokens"][0]["id"] = -1; }, {".id -1 is out of range"});
  // vocab.json ids too.
  mt::testing::expect_error(
      [] { rn::BpeTokenizer::from_vocab_and_merges("{\"a\": 1, \"b\": 1}", "", "v.json"); },
      {"v.json", "both have id 1"});
}
