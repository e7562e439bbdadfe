#include "nn/transformer.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "nn/checkpoint.h"
#include "nn/init.h"
#include "nn/optim/param_groups.h"

namespace mantissa::nn {
namespace {

void check_config(const GPTConfig& c) {
  MT_CHECK(c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0 && c.block_size > 0 && c.vocab_size > 0,
           "GPT: n_layer, n_head, n_embd, block_size and vocab_size must be positive, got n_layer=",
           c.n_layer, " n_head=", c.n_head, " n_embd=", c.n_embd, " block_size=", c.block_size,
           " vocab_size=", c.vocab_size);
  MT_CHECK(c.n_embd % c.n_head == 0, "GPT: n_embd (", c.n_embd, ") must be a multiple of n_head (",
           c.n_head, ")");
  MT_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "GPT: dropout must be in [0, 1), got ", c.dropout);
  MT_CHECK(c.activation == "gelu" || c.activation == "gelu_tanh",
           "GPT: activation must be gelu or gelu_tanh, got ", c.activation);
  MT_CHECK(c.layer_norm_eps > 0.0, "GPT: layer_norm_eps must be positive, got ", c.layer_norm_eps);
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& c)
    : UnaryModule("CausalSelfAttention"), n_head(c.n_head), n_embd(c.n_embd), dropout(c.dropout) {
  check_config(c);
  c_attn = register_module("c_attn", Linear(c.n_embd, 3 * c.n_embd, c.bias));
  c_proj = register_module("c_proj", Linear(c.n_embd, c.n_embd, c.bias));
  resid_dropout = register_module("resid_dropout", Dropout(c.dropout));
}

Tensor CausalSelfAttentionImpl::forward(const Tensor& x, KVCacheEntry* cache) {
  MT_CHECK(x.dim() == 3 && x.size(2) == n_embd,
           "CausalSelfAttention: expected input [B, T, n_embd=", n_embd, "], got ", x.shape());
  const int64_t B = x.size(0), T = x.size(1), hs = n_embd / n_head;
  const std::vector<Tensor> qkv = split(c_attn(x), n_embd, 2);
  // [B, T, C] -> [B, n_head, T, head_size]
  auto heads = [&](const Tensor& t) { return t.view({B, T, n_head, hs}).transpose(1, 2); };
  Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  const int64_t past = cache ? cache->length() : 0;
  if (past > 0) {
    k = cat({cache->k, k}, 2);
    v = cat({cache->v, v}, 2);
  }
  if (cache) {
    cache->k = k;
    cache->v = v;
  }
  // A causal mask aligns positions from the top-left; after `past` cached positions, query t
  // sits at position past + t, so it sees keys 0 .. past + t.
  Tensor mask;
  if (past > 0 && T > 1) {
    mask = tril(ones({T, past + T}, TensorOptions().dtype(kBool).device(x.device())), past);
  }
  const double p = is_training() ? dropout : 0.0;
  Tensor y = scaled_dot_product_attention(q, k, v, mask, p, /*is_causal=*/past == 0);
  y = y.transpose(1, 2).contiguous().view({B, T, n_embd});
  return resid_dropout(c_proj(y));
}

std::string CausalSelfAttentionImpl::extra_repr() const {
  std::ostringstream os;
  os << "n_head=" << n_head << ", n_embd=" << n_embd << ", dropout=" << dropout;
  return os.str();
}

GPTMLPImpl::GPTMLPImpl(const GPTConfig& c) : UnaryModule("MLP") {
  check_config(c);
  c_fc = register_module("c_fc", Linear(c.n_embd, 4 * c.n_embd, c.bias));
  gelu = register_module("gelu", GELU(c.activation == "gelu_tanh" ? "tanh" : "none"));
  c_proj = register_module("c_proj", Linear(4 * c.n_embd, c.n_embd, c.bias));
  dropout = register_module("dropout", Dropout(c.dropout));
}

Tensor GPTMLPImpl::forward(const Tensor& x) { return dropout(c_proj(gelu(c_fc(x)))); }

TransformerBlockImpl::TransformerBlockImpl(const GPTConfig& c) : UnaryModule("Block") {
  check_config(c);
  ln_1 = register_module("ln_1", LayerNorm(c.n_embd, c.layer_norm_eps, true, c.bias));
  attn = register_module("attn", CausalSelfAttention(c));
  ln_2 = register_module("ln_2", LayerNorm(c.n_embd, c.layer_norm_eps, true, c.bias));
  mlp = register_module("mlp", GPTMLP(c));
}

Tensor TransformerBlockImpl::forward(const Tensor& x, KVCacheEntry* cache) {
  Tensor y = add(x, attn->forward(ln_1(x), cache));
  return add(y, mlp(ln_2(y)));
}

TiedLinearImpl::TiedLinearImpl(const Tensor& w) : UnaryModule("Linear") {
  weight = register_parameter("weight", w);
}

Tensor TiedLinearImpl::forward(const Tensor& x) { return linear(x, weight); }

std::string TiedLinearImpl::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << weight.size(1) << ", out_features=" << weight.size(0) << ", bias=False";
  return os.str();
}

GPTImpl::GPTImpl(const GPTConfig& c) : UnaryModule("GPT"), config_(c) {
  check_config(c);
  transformer = register_module("transformer", ModuleDict());
  wte = Embedding(c.vocab_size, c.n_embd);
  wpe = Embedding(c.block_size, c.n_embd);
  drop = Dropout(c.dropout);
  h = ModuleList();
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(TransformerBlock(c));
  ln_f = LayerNorm(c.n_embd, c.layer_norm_eps, true, c.bias);
  transformer->insert("wte", wte);
  transformer->insert("wpe", wpe);
  transformer->insert("drop", drop);
  transformer->insert("h", h);
  transformer->insert("ln_f", ln_f);
  lm_head = register_module("lm_head", TiedLinear(wte->weight));
  reset_parameters();
}

void GPTImpl::reset_parameters(Generator* gen) {
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  init::normal_(wte->weight, 0.0, 0.02, gen);
  init::normal_(wpe->weight, 0.0, 0.02, gen);
  auto linear_init = [&](const Linear& l, double std) {
    init::normal_(l->weight, 0.0, std, gen);
    if (l->bias.defined()) init::zeros_(l->bias);
  };
  auto norm_init = [&](const LayerNorm& ln) {
    init::ones_(ln->weight);
    if (ln->bias.defined()) init::zeros_(ln->bias);
  };
  for (size_t i = 0; i < h->size(); ++i) {
    const auto block = h->at<TransformerBlockImpl>(i);
    norm_init(block->ln_1);
    norm_init(block->ln_2);
    linear_init(block->attn->c_attn, 0.02);
    linear_init(block->attn->c_proj, proj_std);
    linear_init(block->mlp->c_fc, 0.02);
    linear_init(block->mlp->c_proj, proj_std);
  }
  norm_init(ln_f);
}

Tensor GPTImpl::forward(const Tensor& idx) { return lm_head(hidden_impl(idx, nullptr)); }

Tensor GPTImpl::hidden_states(const Tensor& idx) { return hidden_impl(idx, nullptr); }

Tensor GPTImpl::head_loss(const Tensor& hidden, const Tensor& targets, Reduction reduction,
                          double label_smoothing, int64_t ignore_index) const {
  return linear_cross_entropy(hidden, lm_head->weight, targets, Tensor(), reduction,
                              label_smoothing, ignore_index);
}

Tensor GPTImpl::forward(const Tensor& idx, std::vector<KVCacheEntry>& cache) {
  if (cache.empty()) cache.resize(static_cast<size_t>(config_.n_layer));
  MT_CHECK(static_cast<int64_t>(cache.size()) == config_.n_layer, "GPT: the cache has ",
           cache.size(), " entries for a model of n_layer=", config_.n_layer);
  return lm_head(hidden_impl(idx, &cache));
}

Tensor GPTImpl::hidden_impl(const Tensor& idx, std::vector<KVCacheEntry>* cache) {
  MT_CHECK(idx.dim() == 2 && (idx.dtype() == kInt64 || idx.dtype() == kInt32),
           "GPT: expected int64 token ids [B, T], got ", idx.dtype(), " ", idx.shape());
  const int64_t T = idx.size(1);
  const int64_t past = cache ? (*cache)[0].length() : 0;
  MT_CHECK(T > 0, "GPT: expected at least one position, got ", idx.shape());
  MT_CHECK(past + T <= config_.block_size, "GPT: cannot forward a sequence of length ", past + T,
           (past ? " (" + std::to_string(past) + " cached)" : std::string()),
           ", block size is only ", config_.block_size);
  const Tensor pos = arange(past, past + T, 1, TensorOptions().dtype(kInt64).device(idx.device()));
  Tensor x = drop(add(wte(idx), wpe(pos)));
  for (size_t i = 0; i < h->size(); ++i) {
    const auto block = h->at<TransformerBlockImpl>(i);
    const bool checkpointed =
        cache == nullptr && std::find(checkpointed_.begin(), checkpointed_.end(),
                                      static_cast<int64_t>(i)) != checkpointed_.end();
    if (checkpointed) {
      x = checkpoint([block](const Tensor& in) { return block->forward(in, nullptr); }, x,
                     checkpoint_options_);
    } else {
      x = block->forward(x, cache ? &(*cache)[i] : nullptr);
    }
  }
  return ln_f(x);
}

void GPTImpl::set_activation_checkpointing(const std::vector<int64_t>& blocks,
                                           const CheckpointOptions& options) {
  for (const int64_t b : blocks) {
    MT_CHECK(b >= 0 && b < static_cast<int64_t>(h->size()),
             "GPT: activation checkpointing of block ", b, ", but the model has blocks 0 to ",
             h->size() - 1);
  }
  check_checkpoint_options(options);
  checkpointed_ = blocks;
  checkpoint_options_ = options;
}

int64_t GPTImpl::num_parameters(bool non_embedding) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  if (non_embedding) n -= wpe->weight.numel();
  return n;
}

double GPTImpl::flops_per_token() const {
  const double N = static_cast<double>(num_parameters());
  const double L = static_cast<double>(config_.n_layer), H = static_cast<double>(config_.n_head);
  const double Q = static_cast<double>(config_.n_embd / config_.n_head);
  const double T = static_cast<double>(config_.block_size);
  return 6.0 * N + 12.0 * L * H * Q * T;
}

std::vector<optim::ParamGroup> GPTImpl::optimizer_groups(double weight_decay) const {
  return optim::decay_groups(named_parameters(), weight_decay);
}

}  // namespace mantissa::nn
