// GPTImpl::generate: autoregressive sampling with a key/value cache.
#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "nn/transformer.h"

namespace mantissa::nn {
namespace {

// One token per row of logits [B, V], drawn from softmax(logits / temperature) over the top_k
// largest logits (ties with the k-th kept, as nanoGPT's `logits < v[:, [-1]]` filter). The
// arithmetic is in double on the host, so a draw depends only on the logits and the generator.
Tensor sample(const Tensor& logits, double temperature, std::optional<int64_t> top_k,
              Generator& gen) {
  const Tensor host = logits.detach().to(Device::cpu(), kFloat64).contiguous();
  const int64_t B = host.size(0), V = host.size(1);
  const Tensor u = rand({B}, TensorOptions().dtype(kFloat64), &gen);
  const double* l = host.data<double>();
  const double* uu = u.data<double>();
  std::vector<int64_t> out(static_cast<size_t>(B));
  std::vector<double> row(static_cast<size_t>(V)), sorted;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < V; ++j) row[j] = l[b * V + j] / temperature;
    double threshold = -INFINITY;
    if (top_k && *top_k < V) {
      sorted = row;
      std::nth_element(sorted.begin(), sorted.begin() + (*top_k - 1), sorted.end(),
                       std::greater<double>());
      threshold = sorted[*top_k - 1];
    }
    double mx = -INFINITY;
    for (double x : row)
      if (x >= threshold) mx = std::max(mx, x);
    double total = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      row[j] = row[j] >= threshold ? std::exp(row[j] - mx) : 0.0;
      total += row[j];
    }
    // The first token whose cumulative probability exceeds u; the last one with any mass when
    // rounding leaves u above the sum.
    const double target = uu[b] * total;
    double acc = 0.0;
    int64_t pick = -1;
    for (int64_t j = 0; j < V; ++j) {
      if (row[j] == 0.0) continue;
      pick = j;
      acc += row[j];
      if (acc > target) break;
    }
    out[static_cast<size_t>(b)] = pick;
  }
  return from_vector(out, Shape{B, 1}).to(logits.device());
}

}  // namespace

Tensor GPTImpl::generate(const Tensor& idx, int64_t max_new_tokens, double temperature,
                         std::optional<int64_t> top_k, uint64_t seed, bool use_kv_cache) {
  Generator gen(seed);
  return generate(idx, max_new_tokens, temperature, top_k, gen, use_kv_cache);
}

Tensor GPTImpl::generate(const Tensor& idx, int64_t max_new_tokens, double temperature,
                         std::optional<int64_t> top_k, Generator& gen, bool use_kv_cache) {
  MT_CHECK(idx.dim() == 2 && idx.dtype() == kInt64 && idx.size(0) > 0 && idx.size(1) > 0,
           "GPT.generate: expected int64 token ids [B, T] with B, T > 0, got ", idx.dtype(), " ",
           idx.shape());
  MT_CHECK(max_new_tokens >= 0, "GPT.generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  MT_CHECK(temperature > 0 && std::isfinite(temperature),
           "GPT.generate: temperature must be positive and finite, got ", temperature);
  MT_CHECK(!top_k || *top_k > 0, "GPT.generate: top_k must be positive, got ", top_k.value_or(0));
  autograd::NoGradGuard no_grad;
  const int64_t block = config_.block_size;
  Tensor seq = idx;
  std::vector<KVCacheEntry> cache;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t len = seq.size(1);
    Tensor logits;
    if (!use_kv_cache) {
      logits = forward(len <= block ? seq : seq.narrow(1, len - block, block));
    } else if (!cache.empty() && cache[0].length() == len - 1) {
      logits = forward(seq.narrow(1, len - 1, 1), cache);
    } else {
      // First step, or the context no longer fits: (re)fill the cache from the last block_size
      // tokens, whose positions have all shifted.
      cache.clear();
      logits = forward(len <= block ? seq : seq.narrow(1, len - block, block), cache);
    }
    if (cache.size() && cache[0].length() >= block) cache.clear();
    const Tensor last = logits.select(1, logits.size(1) - 1);
    seq = cat({seq, sample(last, temperature, top_k, gen)}, 1);
  }
  return seq;
}

}  // namespace mantissa::nn
