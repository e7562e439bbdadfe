// A parsed JSON document with the runner's checked reads (runner/files/json.h), for tests that read
// what a run wrote: `JsonDoc summary(text); summary.at("steps").as_int()`.
#pragma once

#include <memory>
#include <string_view>

#include "runner/files/json.h"

class JsonDoc : public mantissa::runner::JsonView {
 public:
  explicit JsonDoc(std::string_view text, std::string_view what = "JSON")
      : JsonDoc(std::make_shared<const mantissa::runner::Json>(
            mantissa::runner::json::parse(text, what))) {}

 private:
  // The tree lives on the heap, shared by copies, so the view stays valid when a JsonDoc moves.
  explicit JsonDoc(std::shared_ptr<const mantissa::runner::Json> tree)
      : JsonView(*tree), tree_(std::move(tree)) {}
  std::shared_ptr<const mantissa::runner::Json> tree_;
};
