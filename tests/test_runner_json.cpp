#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runner/json.h"
#include "test_util.h"

using mantissa::runner::Json;
using mantissa::testing::expect_error;

TEST(RunnerJson, RoundTripKeepsOrderAndIntegers) {
  Json j;
  j["step"] = 9007199254740993LL;  // not representable as a double
  j["loss"] = 0.1;
  j["name"] = "a \"quoted\"\nline\x01";
  j["flags"] = Json::array();
  j["flags"].push_back(true);
  j["flags"].push_back(nullptr);
  const Json back = Json::parse(j.dump());
  EXPECT_EQ(back, j);
  EXPECT_EQ(back.at("step").as_int(), 9007199254740993LL);
  EXPECT_EQ(back.at("loss").as_double(), 0.1);
  EXPECT_EQ(back.as_object()[0].first, "step");
  EXPECT_EQ(Json::parse(j.dump(2)), j);
}

TEST(RunnerJson, DoublesStayDoublesAndNonFiniteIsNull) {
  EXPECT_EQ(Json(3.0).dump(), "3.0");
  EXPECT_TRUE(Json::parse("3.0").is_number());
  EXPECT_FALSE(Json::parse("3.0").is_int());
  EXPECT_EQ(Json(std::numeric_limits<double>::infinity()).dump(), "null");
  EXPECT_TRUE(std::isnan(Json::parse("null").as_double()));
  EXPECT_EQ(Json::parse("1e300").as_double(), 1e300);
}

TEST(RunnerJson, ParsesUnicodeEscapes) {
  EXPECT_EQ(Json::parse(R"("\u00e9\ud83d\ude00")").as_string(), "\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(RunnerJson, SyntaxErrorsNameLineAndColumn) {
  expect_error([] { Json::parse("{\n  \"a\": 1,\n  \"a\": 2}", "x.json"); },
               {"x.json: duplicate key 'a' at line 3"});
  expect_error([] { Json::parse("[1, 2", "t"); }, {"t: expected ',' or ']' at line 1, column 6"});
  expect_error([] { Json::parse("{\"a\" 1}", "t"); }, {"expected ':'"});
  expect_error([] { Json::parse("1.2.3", "t"); }, {"malformed number"});
  expect_error([] { Json::parse(std::string(300, '['), "t"); }, {"nesting deeper than 256"});
  expect_error([] { Json::parse("\"abc", "t"); }, {"unterminated string"});
  expect_error([] { Json::parse("[", "t"); }, {"unexpected end of input"});
}

TEST(RunnerJson, TypedAccessErrorsSayWhatWasFound) {
  expect_error([] { Json::parse("\"s\"").as_int(); }, {"expected an integer, got a string"});
  expect_error([] { Json::parse("{}").at("k"); }, {"missing key 'k'"});
  expect_error([] { Json::parse("1.5").as_int(); }, {"expected an integer"});
}
