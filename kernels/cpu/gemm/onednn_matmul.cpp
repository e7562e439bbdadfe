#include "kernels/cpu/gemm/onednn_matmul.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstring>
#include <tuple>
#include <unordered_map>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mantissa::cpu {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

// OpenMP's thread count for this thread set to 1 while alive, so that oneDNN runs on the calling
// thread alone (the count is per thread: other threads and later OpenMP loops keep theirs).
class OneOpenMpThread {
 public:
#if defined(_OPENMP)
  OneOpenMpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOpenMpThread() { omp_set_num_threads(saved_); }

 private:
  int saved_;
#endif
};

dnnl::memory::desc operand_desc(const OneDnnOperand& x, int64_t batch, int64_t rows, int64_t cols,
                                dt type) {
  const int64_t sr = x.trans ? 1 : x.ld, sc = x.trans ? x.ld : 1;
  if (batch == 1) return {dims{rows, cols}, type, dims{sr, sc}};
  // A broadcast operand is one matrix, which oneDNN broadcasts over the batch.
  const bool shared = x.batch_stride == 0;
  return {dims{shared ? 1 : batch, rows, cols}, type,
          dims{shared ? rows * cols : x.batch_stride, sr, sc}};
}

// Everything that selects a primitive: the layout and scalars, not the data.
struct Key {
  OneDnnType type, c_type;
  int64_t batch, M, N, K, a_bs, a_ld, b_bs, b_ld, ldc, c_batch;
  bool a_trans, b_trans;
  float alpha, beta;
  bool operator==(const Key& o) const {
    auto t = [](const Key& k) {
      return std::tie(k.type, k.c_type, k.batch, k.M, k.N, k.K, k.a_bs, k.a_ld, k.b_bs, k.b_ld,
                      k.ldc, k.c_batch, k.a_trans, k.b_trans, k.alpha, k.beta);
    };
    return t(*this) == t(o);
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = static_cast<size_t>(k.type) * 2u + static_cast<size_t>(k.c_type);
    for (int64_t v : {k.batch, k.M, k.N, k.K, k.a_bs, k.a_ld, k.b_bs, k.b_ld, k.ldc, k.c_batch})
      h = h * 1000003u ^ static_cast<size_t>(v);
    return h * 31u + (k.a_trans ? 2u : 0u) + (k.b_trans ? 1u : 0u);
  }
};

// A compiled product with its memory objects, whose data pointers are set per call. Looking one
// up here costs about a microsecond; building it through oneDNN's own cache (descriptors, then
// the cached primitive) costs 5 to 15, which is the whole arithmetic of a small layer's GEMM.
struct Prepared {
  OneDnnRun run = OneDnnRun::Refused;
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
};

// Per thread (primitives are not shared across threads here); bounded, since the shapes a
// program uses are few but a long-lived process might see many.
constexpr size_t kMaxPrepared = 512;

Prepared prepare(const OneDnnProduct& p, const dnnl::engine& engine) {
  const dt type = p.type == OneDnnType::BFloat16 ? dt::bf16 : dt::f32;
  const dt c_type = p.c_type == OneDnnType::BFloat16 ? dt::bf16 : dt::f32;
  Prepared out;
  dnnl::memory::desc ad, bd, cd;
  dnnl::matmul::primitive_desc pd;
  // Every oneDNN error here is a refusal: a layout its descriptors cannot express (overlapping
  // matrices) or one no implementation takes. The caller's own path runs it and counts it.
  try {
    ad = operand_desc(p.a, p.batch, p.M, p.K, type);
    bd = operand_desc(p.b, p.batch, p.K, p.N, type);
    cd = p.batch == 1
             ? dnnl::memory::desc(dims{p.M, p.N}, c_type, dims{p.ldc, 1})
             : dnnl::memory::desc(dims{p.batch, p.M, p.N}, c_type, dims{p.c_batch, p.ldc, 1});
    dnnl::primitive_attr attr;
    if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
    if (p.beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(p.beta);
      attr.set_post_ops(ops);
    }
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), attr, engine);
  } catch (const dnnl::error&) {
    return out;
  }
  const char* impl = pd.impl_info_str();
  if (impl == nullptr || std::strncmp(impl, "ref", 3) == 0) return out;
  out.run = std::strstr(impl, "amx") != nullptr ? OneDnnRun::AmxTiles : OneDnnRun::Vector;
  out.primitive = dnnl::matmul(pd);
  out.a = dnnl::memory(ad, engine, DNNL_MEMORY_NONE);
  out.b = dnnl::memory(bd, engine, DNNL_MEMORY_NONE);
  out.c = dnnl::memory(cd, engine, DNNL_MEMORY_NONE);
  return out;
}

// This thread's compiled product for p's layout, made on first use.
Prepared& lookup(const OneDnnProduct& p, const dnnl::engine& engine) {
  thread_local std::unordered_map<Key, Prepared, KeyHash> prepared;
  const Key key{p.type,           p.c_type,  p.batch,          p.M,    p.N,   p.K,
                p.a.batch_stride, p.a.ld,    p.b.batch_stride, p.b.ld, p.ldc, p.c_batch,
                p.a.trans,        p.b.trans, p.alpha,          p.beta};
  auto it = prepared.find(key);
  if (it == prepared.end()) {
    if (prepared.size() >= kMaxPrepared) prepared.clear();
    it = prepared.emplace(key, prepare(p, engine)).first;
  }
  return it->second;
}

const dnnl::engine& cpu_engine() {
  thread_local dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

}  // namespace

OneDnnRun onednn_matmul_plan(const OneDnnProduct& p) { return lookup(p, cpu_engine()).run; }

OneDnnRun onednn_matmul(const OneDnnProduct& p) {
  thread_local dnnl::stream stream(cpu_engine());
  Prepared& e = lookup(p, cpu_engine());
  if (e.run == OneDnnRun::Refused) return e.run;
  const OneOpenMpThread one_thread;
  e.a.set_data_handle(const_cast<void*>(p.a.base));
  e.b.set_data_handle(const_cast<void*>(p.b.base));
  e.c.set_data_handle(p.c);
  e.primitive.execute(stream, {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}});
  stream.wait();
  return e.run;
}

}  // namespace mantissa::cpu
