#include "runner/training/float8_layers.h"

#include <set>
#include <sstream>

#include "nn/float8.h"
#include "nn/layers.h"

namespace mantissa::runner {

void apply_float8(const Config& c, nn::Module& model, std::vector<std::string>& lines) {
  const Float8TrainingConfig& f = c.float8;
  if (f.recipe == "none") {
    if (!f.layers.empty() || !f.skip.empty())
      c.fail(f.layers.empty() ? "float8.skip" : "float8.layers", "needs float8.recipe");
  }
  if (f.recipe != "delayed") {
    const Float8TrainingConfig d;
    const char* set = f.amax_history_len != d.amax_history_len     ? "float8.amax_history_len"
                      : f.amax_compute_algo != d.amax_compute_algo ? "float8.amax_compute_algo"
                      : f.margin != d.margin                       ? "float8.margin"
                                                                   : nullptr;
    if (set != nullptr) c.fail(set, "applies to float8.recipe: delayed only");
  }
  if (f.recipe == "none") {
    if (f.stats) c.fail("float8.stats", "needs float8.recipe");
    return;
  }
  Float8LinearConfig config = Float8LinearConfig::from_recipe(f.recipe);
  config.delayed.amax_history_len = f.amax_history_len;
  config.delayed.amax_compute_algo =
      f.amax_compute_algo == "max" ? Float8AmaxAlgo::Max : Float8AmaxAlgo::MostRecent;
  config.delayed.margin = f.margin;
  std::vector<std::pair<std::string, const nn::LinearImpl*>> linears;
  for (const auto& [name, m] : model.named_modules())
    if (const auto* l = dynamic_cast<const nn::LinearImpl*>(m.get())) linears.emplace_back(name, l);
  const auto matching = [&](const std::vector<std::string>& patterns, const char* key) {
    std::set<std::string> names;
    for (const std::string& p : patterns) {
      size_t hits = 0;
      for (const auto& [name, l] : linears)
        if (nn::name_matches(p, name)) names.insert(name), ++hits;
      if (hits == 0) c.fail(key, "'" + p + "' names no Linear layer of this model");
    }
    return names;
  };
  const std::set<std::string> named = matching(f.layers, "float8.layers");
  const std::set<std::string> skipped = matching(f.skip, "float8.skip");
  std::set<std::string> chosen;
  std::vector<std::string> left;
  for (const auto& [name, l] : linears) {
    if (skipped.count(name) || (!named.empty() && !named.count(name))) continue;
    if (nn::float8_dims_ok(name, *l)) {
      chosen.insert(name);
      continue;
    }
    if (!named.empty()) {
      c.fail("float8.layers", "layer '" + name + "' has " + std::to_string(l->in_features) +
                                  " in and " + std::to_string(l->out_features) +
                                  " out features; float8 needs multiples of 16");
    }
    left.push_back(name);
  }
  const auto converted = nn::convert_to_float8_training(
      model, config,
      [&](const std::string& name, const nn::LinearImpl&) { return chosen.count(name) > 0; });
  if (converted.empty()) {
    c.fail("float8.recipe", "no Linear layer of this model can run in float8 (" +
                                std::to_string(linears.size()) +
                                " Linear layers; float8 needs in and out features that are "
                                "multiples of 16 and a layer float8.skip does not name)");
  }
  std::string recipe = f.recipe;
  if (config.is_delayed()) {
    std::ostringstream os;
    os << " (amax history " << f.amax_history_len << ", " << f.amax_compute_algo << ", margin "
       << f.margin << ")";
    recipe += os.str();
  }
  std::string line = "float8 " + recipe + ": " + std::to_string(converted.size()) + " of " +
                     std::to_string(linears.size()) + " Linear layers";
  if (!left.empty()) {
    line += "; features not multiples of 16, left in high precision:";
    for (const auto& name : left) line += " " + name;
  }
  if (!skipped.empty()) line += "; skipped by float8.skip: " + std::to_string(skipped.size());
  if (f.stats) {
    nn::track_float8_stats(model);
    line += "; stats on";
  }
  lines.push_back(line);
}

}  // namespace mantissa::runner
