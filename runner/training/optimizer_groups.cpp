#include "runner/training/optimizer_groups.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <variant>

#include "nn/optim/muon.h"
#include "runner/files/text.h"

namespace mantissa::runner {
namespace {

// `names` with the names that differ only in one index written once, the index as `*` and the
// count after it ("transformer.h.*.attn.c_attn.weight x12"), in first-seen order: the start-up
// line of a GPT's groups stays short.
std::string compact_names(const std::vector<std::string>& names) {
  struct Seen {
    std::string pattern, first;
    int count;
  };
  std::vector<Seen> seen;
  for (const std::string& n : names) {
    std::string pattern = n;
    for (size_t i = 0; i + 1 < n.size(); ++i) {
      if (n[i] != '.' || !std::isdigit(static_cast<unsigned char>(n[i + 1]))) continue;
      size_t j = i + 1;
      while (j < n.size() && std::isdigit(static_cast<unsigned char>(n[j]))) ++j;
      if (j == n.size() || n[j] == '.') {
        pattern = n.substr(0, i + 1) + "*" + n.substr(j);
        break;
      }
    }
    auto it =
        std::find_if(seen.begin(), seen.end(), [&](const Seen& e) { return e.pattern == pattern; });
    if (it == seen.end()) {
      seen.push_back({pattern, n, 1});
    } else {
      ++it->count;
    }
  }
  std::string out;
  for (size_t i = 0; i < seen.size(); ++i) {
    out += i ? ", " : "";
    out +=
        seen[i].count == 1 ? seen[i].first : seen[i].pattern + " x" + std::to_string(seen[i].count);
  }
  return out;
}

}  // namespace

std::vector<optim::ParamGroup> muon_param_groups(const Config& c, nn::Module& model,
                                                 std::vector<std::string>& lines) {
  const OptimizerConfig& o = c.optimizer;
  optim::MuonSplit split;
  try {
    split = optim::muon_split(model, o.muon_params, o.adamw_params);
  } catch (const optim::MuonPatternError& e) {
    c.fail(e.list == optim::MuonPatternError::kAdamW ? "optimizer.adamw_params"
                                                     : "optimizer.muon_params",
           first_line(e.what()));
  }
  if (split.muon.empty()) {
    c.fail("optimizer.type",
           "muon: no parameter of this model is for Muon (the rule gives it the "
           "2-D weights of hidden layers); name some in optimizer.muon_params, "
           "or use adamw");
  }
  std::map<std::string, int64_t> numel;
  for (const auto& [name, t] : model.named_parameters()) numel[name] = t.numel();
  const auto line = [&](const char* group, const std::vector<std::string>& names) {
    int64_t n = 0;
    for (const auto& name : names) n += numel[name];
    return std::string("optimizer muon: ") + group + " " + std::to_string(names.size()) +
           (names.size() == 1 ? " tensor (" : " tensors (") + std::to_string(n) +
           " parameters): " + compact_names(names);
  };
  lines.push_back(line("Muon", split.muon));
  if (!split.adamw.empty()) lines.push_back(line("AdamW", split.adamw));
  const auto& muon = std::get<optim::MuonOptions>(o.options);
  try {
    return optim::muon_groups(model, split, muon, o.adamw);
  } catch (const Error& e) {
    c.fail("optimizer.type", first_line(e.what()));
  }
}

}  // namespace mantissa::runner
