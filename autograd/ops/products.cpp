// Products of several operands: einsum, addmm and baddbmm. All three are compositions of
// recorded ops (permute, reshape, expand, sum, mul, add and mm/bmm), so their gradients come from
// those ops' formulas and they need no kernel of their own. They take autocast's lower-precision
// policy: addmm and baddbmm are on PyTorch's list, and PyTorch's einsum runs its bmm under
// autocast, so its results are in the lower precision too.
#include <algorithm>
#include <string>

#include "autograd/functions.h"
#include "autograd/op_bodies.h"

namespace mantissa {
namespace {

// ---- einsum ---------------------------------------------------------------------------------
// Labels are small integers: 'A'-'Z' are 0-25 and 'a'-'z' 26-51 (so sorting labels sorts the
// letters as implicit outputs need), and the dims "..." stands for are 52, 53, ... aligned to the
// right across operands, so that they broadcast.
constexpr int kEllipsisLabel = 52;
using Labels = std::vector<int>;

struct Term {
  Labels labels;
  bool has_ellipsis = false;
  int64_t ellipsis_at = 0;  // position of "..." among the letters
};

char label_char(int l) { return static_cast<char>(l < 26 ? 'A' + l : 'a' + (l - 26)); }

// One operand's subscripts ("ij", "...ij"): its letters and where "..." stands among them.
Term parse_term(const std::string& s, const std::string& equation) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      MT_CHECK(!t.has_ellipsis && s.compare(i, 3, "...") == 0,
               "einsum(): found '.' that is not part of any ellipsis ('...') or a second "
               "ellipsis in '",
               equation, "'");
      t.has_ellipsis = true;
      t.ellipsis_at = static_cast<int64_t>(t.labels.size());
      i += 2;
    } else if (c >= 'A' && c <= 'Z') {
      t.labels.push_back(c - 'A');
    } else if (c >= 'a' && c <= 'z') {
      t.labels.push_back(26 + (c - 'a'));
    } else {
      MT_THROW("einsum(): invalid subscript given at index ", i, " in the equation string '",
               equation, "', subscripts must be in [a-zA-Z]");
    }
  }
  return t;
}

// The labels of each dim: letters around the ellipsis, which takes `ndim - letters` dims.
Labels expand_term(const Term& t, int64_t ellipsis_dims, int64_t max_ellipsis) {
  Labels out(t.labels.begin(), t.labels.begin() + t.ellipsis_at);
  if (t.has_ellipsis)
    for (int64_t k = max_ellipsis - ellipsis_dims; k < max_ellipsis; ++k)
      out.push_back(kEllipsisLabel + static_cast<int>(k));
  out.insert(out.end(), t.labels.begin() + t.ellipsis_at, t.labels.end());
  return out;
}

// A sum over dims that keeps the dtype (integer sums would give int64).
Tensor sum_dims(const Tensor& t, const Shape& dims) {
  if (dims.empty()) return t;
  Tensor s = sum(t, dims);
  return s.dtype() == t.dtype() ? s : s.to(t.dtype());
}

struct Operand {
  Tensor t;
  Labels labels;  // one per dim
};

// Takes the diagonal over every label that repeats within the operand: multiply by the identity
// mask of the two dims and sum the second away (recorded ops, so the gradient follows).
Operand take_diagonals(Operand op, int index) {
  for (size_t p = 0; p < op.labels.size(); ++p) {
    for (size_t q = p + 1; q < op.labels.size(); ++q) {
      if (op.labels[p] != op.labels[q]) continue;
      const int64_t n = op.t.size(p);
      MT_CHECK(op.t.size(q) == n, "einsum(): subscript ", label_char(op.labels[p]),
               " is repeated for operand ", index, " but the sizes don't match, ", n,
               " != ", op.t.size(q));
      Shape at_p(op.t.dim(), 1), at_q(op.t.dim(), 1);
      at_p[p] = n;
      at_q[q] = n;
      const Tensor pos = arange(n, TensorOptions(op.t.device()).dtype(kInt64));
      const Tensor mask = (pos.reshape(at_p) == pos.reshape(at_q)).to(op.t.dtype());
      op.t = sum_dims(op.t * mask, Shape{static_cast<int64_t>(q)});
      op.labels.erase(op.labels.begin() + static_cast<int64_t>(q));
      --q;
    }
  }
  return op;
}

bool contains(const Labels& ls, int l) { return std::find(ls.begin(), ls.end(), l) != ls.end(); }

// Sums away the labels of `op` that are not in `keep`.
Operand sum_unneeded(Operand op, const Labels& keep) {
  Shape dims;
  Labels rest;
  for (size_t i = 0; i < op.labels.size(); ++i) {
    if (contains(keep, op.labels[i])) {
      rest.push_back(op.labels[i]);
    } else {
      dims.push_back(static_cast<int64_t>(i));
    }
  }
  return {sum_dims(op.t, dims), rest};
}

int64_t size_of(const Operand& op, int l) {
  for (size_t i = 0; i < op.labels.size(); ++i)
    if (op.labels[i] == l) return op.t.size(static_cast<int64_t>(i));
  return 1;
}

// a and b with every label of `keep` kept: one bmm over [batch, a-only, contracted] x
// [batch, contracted, b-only]. Labels of size 1 on one side broadcast against the other.
Operand contract(const Operand& a, const Operand& b, const Labels& keep) {
  Labels batch, contracted, a_only, b_only;
  for (int l : a.labels) {
    if (!contains(b.labels, l)) {
      a_only.push_back(l);
    } else {
      (contains(keep, l) ? batch : contracted).push_back(l);
    }
  }
  for (int l : b.labels)
    if (!contains(a.labels, l)) b_only.push_back(l);

  auto arrange = [](const Operand& op, const std::vector<const Labels*>& groups,
                    const Shape& sizes) {
    Shape perm, full;
    int64_t k = 0;
    for (const Labels* g : groups) {
      for (int l : *g) {
        perm.push_back(static_cast<int64_t>(std::find(op.labels.begin(), op.labels.end(), l) -
                                            op.labels.begin()));
        full.push_back(sizes[k++]);
      }
    }
    return op.t.permute(perm).expand(full);
  };
  auto sizes_of = [&](const Labels& ls) {
    Shape s;
    for (int l : ls) s.push_back(std::max(size_of(a, l), size_of(b, l)));
    return s;
  };
  auto numel = [](const Shape& s) { return s.numel(); };
  const Shape sb = sizes_of(batch), sc = sizes_of(contracted), sa = sizes_of(a_only),
              sbo = sizes_of(b_only);
  Shape a_full = sb, b_full = sb;
  for (int64_t v : sa) a_full.push_back(v);
  for (int64_t v : sc) a_full.push_back(v);
  for (int64_t v : sc) b_full.push_back(v);
  for (int64_t v : sbo) b_full.push_back(v);
  const Tensor a3 = arrange(a, {&batch, &a_only, &contracted}, a_full)
                        .reshape(Shape{numel(sb), numel(sa), numel(sc)});
  const Tensor b3 = arrange(b, {&batch, &contracted, &b_only}, b_full)
                        .reshape(Shape{numel(sb), numel(sc), numel(sbo)});
  Shape out_shape = sb;
  for (int64_t v : sa) out_shape.push_back(v);
  for (int64_t v : sbo) out_shape.push_back(v);
  Labels out_labels = batch;
  out_labels.insert(out_labels.end(), a_only.begin(), a_only.end());
  out_labels.insert(out_labels.end(), b_only.begin(), b_only.end());
  return {bmm(a3, b3).reshape(out_shape), out_labels};
}

// ---- addmm and baddbmm ----------------------------------------------------------------------
// beta * input + alpha * product, with input broadcast to the product's shape (a recorded expand,
// so its gradient sums back) and left out when beta is 0.
Tensor scaled_sum(const char* op, const Tensor& input, const Tensor& product, const Scalar& beta,
                  const Scalar& alpha) {
  MT_CHECK(input.defined(), op, ": expected a defined input");
  MT_CHECK(input.dtype() == product.dtype() && input.device() == product.device(), op,
           ": expected input of ", product.dtype(), " on ", product.device(), ", got ",
           input.dtype(), " on ", input.device());
  const Tensor in = input.expand(product.shape());
  const Tensor scaled = alpha.to_double() == 1.0 ? product : mul(product, alpha);
  if (beta.to_double() == 0.0) return scaled;
  return add(scaled, in, beta);
}

}  // namespace

Tensor einsum_op(std::string_view equation_view, const std::vector<Tensor>& operands) {
  std::string equation;
  for (char c : equation_view)
    if (c != ' ') equation += c;
  MT_CHECK(!operands.empty(), "einsum(): must provide at least one operand");
  for (const Tensor& t : operands) {
    MT_CHECK(t.defined(), "einsum(): expected defined tensors");
    MT_CHECK(t.dtype() == operands[0].dtype() && t.device() == operands[0].device(),
             "einsum(): expected operands of one dtype and device, got ", operands[0].dtype(),
             " on ", operands[0].device(), " and ", t.dtype(), " on ", t.device());
  }
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(lhs.substr(start, comma - start), equation));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  MT_CHECK(terms.size() == operands.size(), "einsum(): ",
           terms.size() > operands.size() ? "fewer operands were provided than specified"
                                          : "more operands were provided than specified",
           " in the equation '", equation, "' (", operands.size(), " operands)");

  // Dims under each ellipsis, and the most of any operand.
  int64_t max_ellipsis = 0;
  std::vector<int64_t> ellipsis_dims(terms.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    const int64_t letters = static_cast<int64_t>(terms[i].labels.size());
    const int64_t nd = operands[i].dim();
    MT_CHECK(terms[i].has_ellipsis ? nd >= letters : nd == letters,
             "einsum(): the number of subscripts in the equation (", letters,
             ") does not match the number of dimensions (", nd, ") for operand ", i,
             terms[i].has_ellipsis ? "" : " and no ellipsis was given");
    ellipsis_dims[i] = nd - letters;
    max_ellipsis = std::max(max_ellipsis, ellipsis_dims[i]);
  }
  std::vector<Operand> ops;
  int counts[kEllipsisLabel] = {};
  bool any_ellipsis = false;
  for (size_t i = 0; i < terms.size(); ++i) {
    any_ellipsis = any_ellipsis || terms[i].has_ellipsis;
    for (int l : terms[i].labels) ++counts[l];
    Operand op{operands[i], expand_term(terms[i], ellipsis_dims[i], max_ellipsis)};
    ops.push_back(take_diagonals(op, static_cast<int>(i)));
  }

  // The output's labels: given after "->", else "..." then the letters seen once, sorted.
  Labels out;
  Labels ellipsis_labels;
  for (int64_t k = 0; k < max_ellipsis; ++k)
    ellipsis_labels.push_back(kEllipsisLabel + static_cast<int>(k));
  if (arrow == std::string::npos) {
    out = ellipsis_labels;
    for (int l = 0; l < kEllipsisLabel; ++l)
      if (counts[l] == 1) out.push_back(l);
  } else {
    const Term t = parse_term(equation.substr(arrow + 2), equation);
    MT_CHECK(!t.has_ellipsis || any_ellipsis, "einsum(): ellipsis ('...') in the output of '",
             equation, "' but in none of the operands");
    for (size_t i = 0; i < t.labels.size(); ++i) {
      const int l = t.labels[i];
      MT_CHECK(counts[l] > 0, "einsum(): output subscript ", label_char(l),
               " does not appear in the equation for any input operand ('", equation, "')");
      MT_CHECK(std::count(t.labels.begin(), t.labels.end(), l) == 1, "einsum(): output subscript ",
               label_char(l), " appears more than once in the output ('", equation, "')");
    }
    // Without "..." in the output, the dims it stands for are summed away (as PyTorch does).
    out = expand_term(t, max_ellipsis, max_ellipsis);
  }

  // Every label's size agrees across operands, or is 1 and broadcasts.
  for (size_t i = 0; i < ops.size(); ++i) {
    for (size_t k = 0; k < ops[i].labels.size(); ++k) {
      const int l = ops[i].labels[k];
      for (size_t j = 0; j < i; ++j) {
        const int64_t a = size_of(ops[j], l), b = ops[i].t.size(static_cast<int64_t>(k));
        MT_CHECK(!contains(ops[j].labels, l) || a == b || a == 1 || b == 1,
                 "einsum(): operands do not broadcast with remapped shapes: operand ", j,
                 " has size ", a, " and operand ", i, " size ", b, " for subscript ",
                 l < kEllipsisLabel ? std::string(1, label_char(l)) : std::string("..."));
      }
    }
  }

  // Left to right: keep what the output or a later operand needs, contract the rest.
  auto needed_after = [&](size_t i) {
    Labels keep = out;
    for (size_t j = i + 1; j < ops.size(); ++j)
      keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    return keep;
  };
  Operand cur = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    const Labels later = needed_after(i);
    Labels keep_a = later, keep_b = later;
    keep_a.insert(keep_a.end(), ops[i].labels.begin(), ops[i].labels.end());
    keep_b.insert(keep_b.end(), cur.labels.begin(), cur.labels.end());
    cur = contract(sum_unneeded(cur, keep_a), sum_unneeded(ops[i], keep_b), later);
  }
  cur = sum_unneeded(cur, out);
  Shape perm;
  for (int l : out)
    perm.push_back(static_cast<int64_t>(std::find(cur.labels.begin(), cur.labels.end(), l) -
                                        cur.labels.begin()));
  return cur.t.permute(perm);
}

Tensor addmm_op(const Tensor& input, const Tensor& mat1, const Tensor& mat2, const Scalar& beta,
                const Scalar& alpha) {
  return scaled_sum("addmm", input, mm(mat1, mat2), beta, alpha);
}

Tensor baddbmm_op(const Tensor& input, const Tensor& batch1, const Tensor& batch2,
                  const Scalar& beta, const Scalar& alpha) {
  return scaled_sum("baddbmm", input, bmm(batch1, batch2), beta, alpha);
}

}  // namespace mantissa
