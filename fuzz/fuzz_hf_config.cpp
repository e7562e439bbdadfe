// Fuzz target: Hugging Face GPT-2's config.json reader, runner::parse_hf_gpt2_config (read beside
// model.init_from and by `mantissa import`).
//
// Input: the file's text. A mantissa::Error is a clean refusal. An accepted config must describe
// a model nn::GPT can be (positive sizes, n_embd a multiple of n_head, a known activation, a
// positive epsilon), and the config.json written for that model must read back to the same one.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "runner/files/hf_gpt2_config.h"

namespace mt = mantissa;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mt::fuzz::quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const mt::runner::HfGpt2Config h = mt::runner::parse_hf_gpt2_config(text, "config.json");
    const mt::nn::GPTConfig& c = h.gpt;
    if (c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 || c.block_size <= 0 ||
        c.vocab_size <= 0 || c.n_embd % c.n_head != 0 || !(c.layer_norm_eps > 0) ||
        (c.activation != "gelu" && c.activation != "gelu_tanh"))
      std::abort();
    const mt::runner::HfGpt2Config back =
        mt::runner::parse_hf_gpt2_config(mt::runner::hf_gpt2_config_json(c), "written");
    if (back.gpt.n_layer != c.n_layer || back.gpt.n_head != c.n_head ||
        back.gpt.n_embd != c.n_embd || back.gpt.block_size != c.block_size ||
        back.gpt.vocab_size != c.vocab_size || back.gpt.activation != c.activation ||
        back.gpt.layer_norm_eps != c.layer_norm_eps)
      std::abort();
  } catch (const mt::Error& e) {
    mt::fuzz::refused(e);
  }
  return 0;
}
