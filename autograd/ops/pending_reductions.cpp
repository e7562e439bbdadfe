// TEMPORARY scaffolding so the library links while reductions are written. Delete this file.
#include "autograd/functions.h"
namespace mantissa {
#define P MT_THROW("pending")
Tensor sum(const Tensor&, const Shape&, bool, std::optional<DType>) { P; }
Tensor mean(const Tensor&, const Shape&, bool) { P; }
Tensor amax(const Tensor&, const Shape&, bool) { P; }
Tensor amin(const Tensor&, const Shape&, bool) { P; }
Tensor max(const Tensor&) { P; }
Tensor min(const Tensor&) { P; }
ValuesIndices max(const Tensor&, int64_t, bool) { P; }
ValuesIndices min(const Tensor&, int64_t, bool) { P; }
Tensor argmax(const Tensor&, std::optional<int64_t>, bool) { P; }
Tensor argmin(const Tensor&, std::optional<int64_t>, bool) { P; }
Tensor var(const Tensor&, const Shape&, int64_t, bool) { P; }
Tensor std(const Tensor&, const Shape&, int64_t, bool) { P; }
Tensor norm(const Tensor&, double, const Shape&, bool) { P; }
Tensor all_finite(const Tensor&) { P; }
Tensor softmax(const Tensor&, int64_t) { P; }
Tensor log_softmax(const Tensor&, int64_t) { P; }
Tensor Tensor::sum() const { P; }
Tensor Tensor::sum(const Shape&, bool) const { P; }
Tensor Tensor::mean() const { P; }
Tensor Tensor::mean(const Shape&, bool) const { P; }
Tensor Tensor::max() const { P; }
Tensor Tensor::min() const { P; }
Tensor Tensor::argmax(std::optional<int64_t>, bool) const { P; }
Tensor Tensor::softmax(int64_t) const { P; }
Tensor Tensor::log_softmax(int64_t) const { P; }
}  // namespace mantissa
