// A GPT-2-style decoder as nanoGPT writes it: CausalSelfAttention, TransformerBlock (pre-LayerNorm)
// and GPT, with nanoGPT's module and parameter names ("transformer.h.0.attn.c_attn.weight"), so
// its state dicts load here unchanged and ours load there. Generation keeps a per-layer key/value
// cache, so each new token runs one position through the model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "nn/checkpoint.h"
#include "nn/layers.h"
#include "nn/norm.h"
#include "nn/optim/optimizer.h"

namespace mantissa::nn {

struct GPTConfig {
  int64_t block_size = 1024;  // the longest sequence (rows of wpe)
  int64_t vocab_size = 50304;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linear and LayerNorm layers
  // The MLP's activation: "gelu" (exact, nanoGPT's) or "gelu_tanh" (the tanh approximation,
  // Hugging Face GPT-2's "gelu_new").
  std::string activation = "gelu";
  double layer_norm_eps = 1e-5;  // every LayerNorm's (HF GPT-2: layer_norm_epsilon)
};

// The keys and values one attention layer has seen so far ([B, n_head, S, head_dim] each), so a
// new position attends to them without recomputing them.
struct KVCacheEntry {
  Tensor k, v;
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
};

// Multi-head causal self-attention: c_attn (n_embd -> 3 n_embd) gives q, k and v, c_proj mixes the
// heads. attn_dropout applies to the attention weights (through the attention op's dropout_p) and
// resid_dropout to the output, both in training mode only.
class CausalSelfAttentionImpl : public UnaryModule {
 public:
  explicit CausalSelfAttentionImpl(const GPTConfig& config);
  // x [B, T, n_embd] -> [B, T, n_embd], each position attending to itself and those before it.
  Tensor forward(const Tensor& x) override { return forward(x, nullptr); }
  // With a cache, x's positions follow the cached ones: they attend to the cache and to each
  // other causally, and their keys and values are appended to it.
  Tensor forward(const Tensor& x, KVCacheEntry* cache);
  std::string extra_repr() const override;
  Linear c_attn{nullptr}, c_proj{nullptr};
  Dropout resid_dropout{nullptr};
  int64_t n_head, n_embd;
  double dropout;
};
MANTISSA_MODULE(CausalSelfAttention);

// c_fc (n_embd -> 4 n_embd) -> GELU (exact) -> c_proj -> dropout.
class GPTMLPImpl : public UnaryModule {
 public:
  explicit GPTMLPImpl(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;
  Linear c_fc{nullptr}, c_proj{nullptr};
  GELU gelu{nullptr};
  Dropout dropout{nullptr};
};
MANTISSA_MODULE(GPTMLP);

// x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class TransformerBlockImpl : public UnaryModule {
 public:
  explicit TransformerBlockImpl(const GPTConfig& config);
  Tensor forward(const Tensor& x) override { return forward(x, nullptr); }
  Tensor forward(const Tensor& x, KVCacheEntry* cache);
  LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  GPTMLP mlp{nullptr};
};
MANTISSA_MODULE(TransformerBlock);

// The output layer whose weight is the token embedding's (one tensor): a Linear without bias that
// does not own its weight, printed and named as nanoGPT's lm_head.
class TiedLinearImpl : public UnaryModule {
 public:
  explicit TiedLinearImpl(const Tensor& weight);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;
};
MANTISSA_MODULE(TiedLinear);

// token + position embeddings -> drop -> n_layer blocks -> ln_f -> lm_head, lm_head.weight being
// transformer.wte.weight. named_parameters() lists the tied tensor once (as
// "transformer.wte.weight"); state_dict() has both keys, as nanoGPT's. Weights start as nanoGPT's:
// N(0, 0.02) for Linear and Embedding weights, N(0, 0.02 / sqrt(2 n_layer)) for the residual
// projections (c_proj), zero biases, LayerNorm ones and zeros.
class GPTImpl : public UnaryModule {
 public:
  explicit GPTImpl(const GPTConfig& config);
  // idx int64 [B, T] with T <= block_size -> logits [B, T, vocab_size].
  Tensor forward(const Tensor& idx) override;
  // idx's positions follow those in `cache` (one entry per layer, filled as it runs).
  Tensor forward(const Tensor& idx, std::vector<KVCacheEntry>& cache);
  // The final hidden states ln_f(...) [B, T, n_embd] that lm_head turns into logits.
  Tensor hidden_states(const Tensor& idx);
  // cross_entropy(lm_head(hidden), targets) over the B * T positions, computed by
  // linear_cross_entropy without ever holding the [B * T, vocab_size] logits (the fused head:
  // model.fused_head_loss in a run's config). targets [B, T] as hidden's leading dims.
  Tensor head_loss(const Tensor& hidden, const Tensor& targets,
                   Reduction reduction = Reduction::Mean, double label_smoothing = 0.0,
                   int64_t ignore_index = -100) const;

  // Appends max_new_tokens tokens to idx [B, T] (int64), sampled one at a time from
  // softmax(logits / temperature) of the last position, restricted to the top_k most likely
  // tokens when given; returns [B, T + max_new_tokens]. The same generator state gives the same
  // tokens. With use_kv_cache, each new token runs one position through the model; once the
  // sequence is longer than block_size, the context is cropped to its last block_size tokens and
  // recomputed, as nanoGPT does. Runs without recording gradients and in the module's current
  // mode (call eval() first to disable dropout, as nanoGPT's sample.py does).
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, double temperature,
                  std::optional<int64_t> top_k, Generator& gen, bool use_kv_cache = true);
  // The same with a generator seeded with `seed`.
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, double temperature = 1.0,
                  std::optional<int64_t> top_k = std::nullopt, uint64_t seed = 0,
                  bool use_kv_cache = true);

  // nanoGPT's get_num_params: every parameter once, less the position embeddings when
  // non_embedding (the token embeddings stay: they are the output layer too).
  int64_t num_parameters(bool non_embedding = true) const;
  // nanoGPT's estimate of training FLOPs per token (PaLM appendix B):
  // 6 N + 12 n_layer n_head head_dim block_size, N = num_parameters().
  double flops_per_token() const;
  // nanoGPT's optimizer groups: parameters with two or more dimensions (matmul weights,
  // embeddings) with weight_decay, the others (biases, LayerNorm) with none.
  std::vector<optim::ParamGroup> optimizer_groups(double weight_decay) const;

  // Re-draws every weight as at construction, from `gen` (or the default generator).
  void reset_parameters(Generator* gen = nullptr);

  // Activation checkpointing (nn/checkpoint.h) of these blocks (indices into h) while the
  // forward records for backward: each one's activations are recomputed in backward instead of
  // kept, for the same gradients. Empty: none (the default). Throws for an index out of range.
  // `options.save_ops` makes it selective: {"scaled_dot_product_attention"} keeps each block's
  // attention output, whose recomputation is then skipped (nn/checkpoint.h).
  void set_activation_checkpointing(const std::vector<int64_t>& blocks,
                                    const CheckpointOptions& options = {});
  const std::vector<int64_t>& activation_checkpointing() const { return checkpointed_; }
  const CheckpointOptions& activation_checkpointing_options() const { return checkpoint_options_; }

  const GPTConfig& config() const { return config_; }
  ModuleDict transformer{nullptr};
  Embedding wte{nullptr}, wpe{nullptr};
  Dropout drop{nullptr};
  ModuleList h{nullptr};
  LayerNorm ln_f{nullptr};
  TiedLinear lm_head{nullptr};

 private:
  Tensor hidden_impl(const Tensor& idx, std::vector<KVCacheEntry>* cache);
  GPTConfig config_;
  std::vector<int64_t> checkpointed_;
  CheckpointOptions checkpoint_options_;
};
MANTISSA_MODULE(GPT);

}  // namespace mantissa::nn
