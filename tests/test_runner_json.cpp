#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "runner/files/json.h"
#include "test_util.h"

using mantissa::runner::Json;
using mantissa::runner::JsonView;
namespace json = mantissa::runner::json;
using mantissa::testing::expect_error;

TEST(RunnerJson, RoundTripKeepsOrderAndIntegers) {
  Json j;
  j["step"] = 9007199254740993LL;  // not representable as a double
  j["loss"] = 0.1;
  j["name"] = "a \"quoted\"\nline\x01";
  j["flags"] = Json::array();
  j["flags"].push_back(true);
  j["flags"].push_back(nullptr);
  const Json back = json::parse(json::dump(j));
  EXPECT_EQ(back, j);
  EXPECT_EQ(JsonView(back).at("step").as_int(), 9007199254740993LL);
  EXPECT_EQ(JsonView(back).at("loss").as_double(), 0.1);
  EXPECT_EQ(back.begin().key(), "step");
  EXPECT_EQ(json::parse(json::dump(j, 2)), j);
}

TEST(RunnerJson, DoublesStayDoublesAndNonFiniteIsNull) {
  EXPECT_EQ(json::dump(Json(3.0)), "3.0");
  EXPECT_TRUE(JsonView(json::parse("3.0")).is_number());
  EXPECT_FALSE(JsonView(json::parse("3.0")).is_int());
  EXPECT_EQ(json::dump(Json(std::numeric_limits<double>::infinity())), "null");
  EXPECT_TRUE(std::isnan(JsonView(json::parse("null")).as_double()));
  EXPECT_EQ(JsonView(json::parse("1e300")).as_double(), 1e300);
}

TEST(RunnerJson, ParsesUnicodeEscapes) {
  EXPECT_EQ(JsonView(json::parse(R"("\u00e9\ud83d\ude00")")).as_string(),
            "\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(RunnerJson, SyntaxErrorsNameLineAndColumn) {
  expect_error([] { json::parse("{\n  \"a\": 1,\n  \"a\": 2}", "x.json"); },
               {"x.json: duplicate key 'a' at line 3"});
  // The problem in nlohmann-json's words, the position in ours.
  expect_error([] { json::parse("[1, 2", "t"); },
               {"t: ", "unexpected end of input; expected ']'", "at line 1, column 6"});
  expect_error([] { json::parse("{\"a\" 1}", "t"); }, {"expected ':'", "at line 1, column 6"});
  expect_error([] { json::parse("1.2.3", "t"); }, {"t: ", "'1.2.'", "at line 1, column 4"});
  expect_error([] { json::parse(std::string(300, '['), "t"); }, {"nesting deeper than 256"});
  expect_error([] { json::parse("\"abc", "t"); }, {"missing closing quote"});
  expect_error([] { json::parse("[", "t"); }, {"unexpected end of input"});
  expect_error([] { json::parse("", "t"); }, {"t: ", "unexpected end of input", "column 1"});
  expect_error([] { json::parse("[1]\n  x", "t"); },
               {"expected end of input", "at line 2, column 3"});
}

TEST(RunnerJson, TypedAccessErrorsSayWhatWasFound) {
  expect_error([] { JsonView(json::parse("\"s\"")).as_int(); },
               {"expected an integer, got a string"});
  expect_error([] { JsonView(json::parse("{}")).at("k"); }, {"missing key 'k'"});
  expect_error([] { JsonView(json::parse("1.5")).as_int(); }, {"expected an integer"});
}

// ---- exactness: what a double round trip would lose ---------------------------------------------

TEST(RunnerJson, Int64AndUint64ExtremesRoundTripExactly) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  const uint64_t umax = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(json::dump(Json(lo)), "-9223372036854775808");
  EXPECT_EQ(json::dump(Json(hi)), "9223372036854775807");
  EXPECT_EQ(json::dump(Json(umax)), "18446744073709551615");
  EXPECT_EQ(JsonView(json::parse("-9223372036854775808")).as_int(), lo);
  EXPECT_EQ(JsonView(json::parse("9223372036854775807")).as_int(), hi);
  const Json u = json::parse("18446744073709551615");
  EXPECT_TRUE(JsonView(u).is_int());
  EXPECT_EQ(JsonView(u).as_uint(), umax);
  EXPECT_EQ(u, Json(umax));
  EXPECT_EQ(JsonView(json::parse("9223372036854775808")).as_uint(), uint64_t{1} << 63);
  // 2^53 + 1 is the first integer a double cannot hold.
  EXPECT_EQ(JsonView(json::parse("9007199254740993")).as_int(), 9007199254740993LL);
  EXPECT_EQ(json::dump(Json(9007199254740993LL)), "9007199254740993");
  // In an object, through dump() and parse(), both layouts.
  Json j;
  j["lo"] = lo;
  j["hi"] = hi;
  j["umax"] = umax;
  j["odd"] = uint64_t{9007199254740993};
  for (int indent : {0, 2}) {
    const Json back = json::parse(json::dump(j, indent));
    EXPECT_EQ(back, j) << json::dump(j, indent);
    EXPECT_EQ(JsonView(back).at("lo").as_int(), lo);
    EXPECT_EQ(JsonView(back).at("hi").as_int(), hi);
    EXPECT_EQ(JsonView(back).at("umax").as_uint(), umax);
    EXPECT_EQ(JsonView(back).at("odd").as_uint(), 9007199254740993ULL);
  }
  // Integer and unsigned readers refuse what they cannot hold, instead of wrapping.
  expect_error([&] { JsonView(u).as_int(); }, {"int64 range", "18446744073709551615"});
  expect_error([] { JsonView(Json(-1)).as_uint(); }, {"non-negative integer", "-1"});
  // Past uint64: a double, as before (no error, no wrap-around).
  const Json big = json::parse("18446744073709551616");
  EXPECT_FALSE(JsonView(big).is_int());
  EXPECT_EQ(JsonView(big).as_double(), 18446744073709551616.0);
}

TEST(RunnerJson, DoublesRoundTripBitForBit) {
  EXPECT_EQ(json::dump(Json(0.1)), "0.1");
  EXPECT_EQ(json::dump(Json(-2.5)), "-2.5");
  EXPECT_EQ(json::dump(Json(-0.0)), "-0.0");
  std::vector<double> values = {0.1,
                                1e-300,
                                5e-324,  // the smallest subnormal
                                2.2250738585072014e-308,
                                std::numeric_limits<double>::max(),
                                9007199254740993.0,  // rounds to 2^53: stays a double
                                1.0 / 3.0,
                                123456789.125,
                                1e15,
                                1e16,
                                -0.0};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isfinite(d)) values.push_back(d);
  }
  for (const double d : values) {
    const std::string text = json::dump(Json(d));
    const Json back = json::parse(text);
    ASSERT_FALSE(JsonView(back).is_int()) << text << " must read back as a double";
    const double r = JsonView(back).as_double();
    EXPECT_EQ(std::memcmp(&r, &d, sizeof d), 0) << text;
  }
}

// ---- the text layout the run files have always had ----------------------------------------------

TEST(RunnerJson, CompactAndIndentedLayouts) {
  Json j;
  j["step"] = 1;
  j["loss"] = 0.5;
  j["note"] = "a, b: \"c\"";  // separators inside a string stay as they are
  j["dims"] = Json::array();
  j["dims"].push_back(2);
  j["dims"].push_back(3);
  j["empty"] = Json::object();
  EXPECT_EQ(json::dump(j),
            R"({"step": 1, "loss": 0.5, "note": "a, b: \"c\"", "dims": [2, 3], "empty": {}})");
  EXPECT_EQ(json::dump(j, 2),
            "{\n  \"step\": 1,\n  \"loss\": 0.5,\n  \"note\": \"a, b: \\\"c\\\"\",\n"
            "  \"dims\": [\n    2,\n    3\n  ],\n  \"empty\": {}\n}");
  EXPECT_EQ(json::dump(Json("tab\there\\")), R"("tab\there\\")");
  EXPECT_EQ(json::dump(Json(std::string("nul\0x", 5))), R"("nul\u0000x")");
  // Keys keep their order, not sorted.
  EXPECT_EQ(json::dump(json::parse(R"({"b": 1, "a": 2})")), R"({"b": 1, "a": 2})");
}

// ---- hostile input ------------------------------------------------------------------------------

TEST(RunnerJson, DeepNestingIsRefusedNotACrash) {
  // nlohmann's parser keeps its own stack; the limit protects the recursive code that walks and
  // destroys our tree. Far past it: an error, not a stack overflow.
  for (const std::string& open : {std::string("["), std::string("{\"a\":")}) {
    std::string deep;
    for (int i = 0; i < 100000; ++i) deep += open;
    expect_error([&] { json::parse(deep, "deep"); },
                 {"deep: nesting deeper than 256 levels", "line 1, column "});
  }
  // Exactly the limit is fine.
  const int n = json::kMaxDepth;
  const Json ok = json::parse(std::string(n, '[') + std::string(n, ']'));
  EXPECT_TRUE(ok.is_array());
  expect_error([&] { json::parse(std::string(n + 1, '[') + std::string(n + 1, ']'), "t"); },
               {"nesting deeper than 256 levels", "column 257"});
}

TEST(RunnerJson, BadStringsAreRefusedNotACrash) {
  // Bytes that are not UTF-8, truncated sequences, overlong forms, lone surrogates.
  for (const std::string& bad :
       {std::string("\"\xff\""), std::string("\"\xc3\""), std::string("\"\xc0\xaf\""),
        std::string("\"\xed\xa0\x80\""), std::string("\"\xf4\x90\x80\x80\"")}) {
    expect_error([&] { json::parse(bad, "t"); }, {"t: ", "ill-formed UTF-8", "at line 1"});
  }
  expect_error([] { json::parse(R"("\ud800")", "t"); }, {"surrogate"});
  expect_error([] { json::parse(R"("\udc00x")", "t"); }, {"surrogate"});
  // A raw control character must be escaped; the message shows it escaped, never raw.
  expect_error([] { json::parse("\"a\x01z\"", "t"); }, {"control character U+0001"});
  expect_error([] { json::parse(std::string("[\"\n\"]"), "t"); }, {"control character"});
  // Escaped, they are fine, NUL included.
  EXPECT_EQ(JsonView(json::parse(R"("\u0000\u001f")")).as_string(), std::string("\0\x1f", 2));
  // A bad byte late in a long string: the message stays short.
  const std::string huge = "\"" + std::string(1 << 20, 'a') + "\x01\"";
  try {
    json::parse(huge, "t");
    ADD_FAILURE() << "expected an error";
  } catch (const mantissa::Error& e) {
    EXPECT_LT(std::strlen(e.what()), 400u) << e.what();
  }
  // Writing a string that is not UTF-8 (a file name, say) gives text that parses again.
  const Json back = json::parse(json::dump(Json("caf\xe9")));
  EXPECT_EQ(JsonView(back).as_string(), "caf\xef\xbf\xbd");  // U+FFFD for the bad byte
  EXPECT_EQ(JsonView(json::parse(json::dump(Json("caf\xc3\xa9")))).as_string(), "caf\xc3\xa9");
}

TEST(RunnerJson, DuplicateKeysAreRefusedWhereverTheyAre) {
  // Neither the first nor the last silently wins: a file with both is ambiguous.
  expect_error([] { json::parse(R"({"a": {"b": 1, "b": 2}})", "t"); },
               {"t: duplicate key 'b' at line 1, column 19"});
  expect_error([] { json::parse(R"([{"k": 1}, {"k": 2, "k": 3}])", "t"); }, {"duplicate key 'k'"});
  // The same key in sibling objects is not a duplicate.
  EXPECT_EQ(JsonView(json::parse(R"([{"k": 1}, {"k": 2}])"))[1].at("k").as_int(), 2);
}

TEST(RunnerJson, OtherMalformedInput) {
  expect_error([] { json::parse("1e400", "t"); }, {"number overflow", "'1e400'"});
  expect_error([] { json::parse("[1,]", "t"); }, {"t: ", "at line 1, column 4"});
  expect_error([] { json::parse("01", "t"); }, {"t: "});
  expect_error([] { json::parse("[1] // no comments", "t"); }, {"t: "});
  expect_error([] { json::parse("NaN", "t"); }, {"t: "});
  expect_error([] { json::parse("{\"a\": tru}", "t"); }, {"t: ", "invalid literal", "column 10"});
  // Whitespace around the value is fine.
  EXPECT_EQ(JsonView(json::parse(" \t\r\n 7 \n")).as_int(), 7);
}

TEST(RunnerJson, ViewsReadArraysAndObjectsWithChecks) {
  const Json j = json::parse(R"({"a": [1, 2.5, "s"], "o": {"x": 1, "y": null}, "n": 4})");
  const JsonView v(j);
  std::vector<std::string> kinds;
  for (const JsonView e : v.at("a").elements())
    kinds.push_back(e.is_int() ? "int" : e.is_number() ? "number" : "other");
  EXPECT_EQ(kinds, (std::vector<std::string>{"int", "number", "other"}));
  std::vector<std::string> keys;
  for (const auto& [k, e] : v.at("o").members()) keys.push_back(k + (e.is_null() ? "=null" : ""));
  EXPECT_EQ(keys, (std::vector<std::string>{"x", "y=null"}));
  EXPECT_FALSE(v.find("missing").has_value());
  EXPECT_FALSE(v.at("n").find("x").has_value());  // not an object: nothing to find
  EXPECT_EQ(v.at("a").size(), 3u);
  EXPECT_EQ(v.at("a")[2].as_string(), "s");
  expect_error([&] { (void)v.at("o").elements(); }, {"expected an array, got an object"});
  expect_error([&] { (void)v.at("a").members(); }, {"expected an object, got an array"});
  expect_error([&] { (void)v.at("n").size(); }, {"size() of an integer"});
  expect_error([&] { (void)v.at("a")[3]; }, {"index 3 out of range for an array of 3"});
  expect_error([&] { (void)v.at("n").at("x"); },
               {"expected an object with key 'x', got an integer"});
  // A parsed non-negative integer and the same value written by a program compare equal.
  EXPECT_EQ(json::parse("5"), Json(int64_t{5}));
  EXPECT_EQ(v.at("n").as_uint(), 4u);
}
