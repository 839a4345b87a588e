// The common ops without boxing: an unboxed kernel on the hook's key for each op listed below.
//
// The boxed fallback (hook.cpp) is the hook for every op, but boxing costs about a microsecond per op on a
// launch-bound step (the dispatcher copies the arguments into a stack of IValues, the next kernel takes them out
// again, and the returns go the same way back): as much as all of the hook's own work. An op listed here reaches
// `Unboxed<Op>::call` with its arguments as the C++ types of its schema and is passed on with `Op::redispatch`; the
// watched part is hook.cpp's `watched`, the same code the fallback runs, reading the same plan (op_table.py), so
// what is found does not depend on which way an op came. An op whose plan is not a plain access (a collective,
// record_stream, an op only Python can handle) goes to the boxed hook, boxed here. `set_tuning("unboxed", False)`
// sends every listed op to the boxed hook too: the side-by-side measurement (benchmarks/native_profile.py).
//
// The list: what a transformer's training step calls most at this key (above autograd: composite ops before they
// decompose, and the ops backward formulas and optimizers call), every one of them a plain access in op_table.py;
// `native_profile.py --count-ops` prints which ops still reach the hook boxed on a workload, and how often.
// Built with -DSTREAMCHECK_NO_UNBOXED (native.py's first fallback: it follows ATen's generated op headers), none is.
#pragma once
#ifndef STREAMCHECK_NO_UNBOXED

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_foreach_sqrt_ops.h>
#include <ATen/ops/_has_compatible_shallow_copy_type_ops.h>
#include <ATen/ops/_local_scalar_dense_ops.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_backward_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/_to_copy_ops.h>
#include <ATen/ops/_unsafe_view_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/alias_ops.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/as_strided_ops.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/clone_ops.h>
#include <ATen/ops/contiguous_ops.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/detach_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/embedding_ops.h>
#include <ATen/ops/empty_like_ops.h>
#include <ATen/ops/empty_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/expand_ops.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/flatten_dense_tensors_ops.h>
#include <ATen/ops/flatten_ops.h>
#include <ATen/ops/isfinite_ops.h>
#include <ATen/ops/item_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/lift_fresh_ops.h>
#include <ATen/ops/linalg_vector_norm_ops.h>
#include <ATen/ops/linear_ops.h>
#include <ATen/ops/logical_and_ops.h>
#include <ATen/ops/logical_not_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/matmul_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/narrow_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/new_empty_ops.h>
#include <ATen/ops/new_zeros_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/ones_like_ops.h>
#include <ATen/ops/permute_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/reshape_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/scaled_dot_product_attention_ops.h>
#include <ATen/ops/select_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/slice_backward_ops.h>
#include <ATen/ops/slice_ops.h>
#include <ATen/ops/split_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/squeeze_ops.h>
#include <ATen/ops/stack_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/t_ops.h>
#include <ATen/ops/to_ops.h>
#include <ATen/ops/transpose_ops.h>
#include <ATen/ops/unflatten_dense_tensors_ops.h>
#include <ATen/ops/unsqueeze_ops.h>
#include <ATen/ops/view_as_ops.h>
#include <ATen/ops/view_ops.h>
#include <ATen/ops/zero_ops.h>
#include <ATen/ops/zeros_like_ops.h>
#include <ATen/ops/zeros_ops.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace streamcheck_native {

// f(tensor) for each tensor an argument or a return holds, as for_each_tensor (memory.h) does for an IValue
template <class T, class F>
inline void each_tensor_of(const T& value, F&& f) {
  using V = std::decay_t<T>;
  if constexpr (std::is_same_v<V, at::Tensor>) {
    f(value);
  } else if constexpr (std::is_same_v<V, std::optional<at::Tensor>>) {
    if (value.has_value()) f(*value);
  } else if constexpr (std::is_same_v<V, at::TensorList> || std::is_same_v<V, std::vector<at::Tensor>> ||
                       std::is_same_v<V, at::ITensorListRef>) {
    for (const at::Tensor& t : value) f(t);
  }  // anything else (scalars, sizes, dtypes, ...) holds no tensor
}

template <class T>
struct is_tuple : std::false_type {};
template <class... T>
struct is_tuple<std::tuple<T...>> : std::true_type {};

template <class R, class F>
inline void each_return(const R& value, F&& f) {  // f(index, tensor) for each tensor of each return
  using V = std::decay_t<R>;
  if constexpr (is_tuple<V>::value) {
    std::apply([&](const auto&... item) {
      size_t i = 0;
      ((each_tensor_of(item, [&](const at::Tensor& t) { f(i, t); }), ++i), ...);
    }, value);
  } else {  // one return: a tensor, a list of them, or no tensor at all (a Scalar)
    each_tensor_of(value, [&](const at::Tensor& t) { f(size_t{0}, t); });
  }
}

template <class R>
struct Returned {  // the op's return, kept until the hook has read it (a reference return as a pointer)
  std::optional<R> value;
  template <class Run>
  void run(Run&& run) { value.emplace(run()); }
  R take() { return std::move(*value); }
  const R& get() const { return *value; }
};
template <class R>
struct Returned<R&> {
  R* value = nullptr;
  template <class Run>
  void run(Run&& run) { value = &run(); }
  R& take() { return *value; }
  const R& get() const { return *value; }
};

// An argument type that holds its tensors by value: passed on to the op by std::forward, it may be moved from
template <class T>
constexpr bool owns_tensors = std::is_same_v<T, at::Tensor> || std::is_same_v<T, std::optional<at::Tensor>> ||
                              std::is_same_v<T, std::vector<at::Tensor>> || std::is_same_v<T, c10::List<at::Tensor>> ||
                              std::is_same_v<T, c10::List<std::optional<at::Tensor>>>;

// kZero2: one of the ops added from `native_profile.py --count-ops` on DeepSpeed ZeRO-2 (session 9), which
// `set_tuning("unboxed_zero2", False)` sends boxed again: their saving, measured beside the rest in one process
template <class Op, bool kZero2 = false, class Schema = typename Op::schema>
struct Unboxed;

template <class Op, bool kZero2, class R, class... A>
struct Unboxed<Op, kZero2, R(A...)> {
  static const c10::OperatorHandle& handle() {
    static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return op;
  }

  static R boxed(c10::DispatchKeySet keys, A... args) {  // the boxed hook, as the fallback would have been called
    static const c10::KernelFunction kernel = c10::KernelFunction::makeFromBoxedFunction<&hook>();
    return kernel.call<R, A...>(handle(), keys, std::forward<A>(args)...);
  }

  static R call(c10::DispatchKeySet keys, A... args) {
    if (!tuning().unboxed || (kZero2 && !tuning().unboxed_zero2)) return boxed(keys, std::forward<A>(args)...);
    c10::impl::ExcludeDispatchKeyGuard no_hook(kHookKey);  // the op's inner ops, and our own Python, go unseen
    c10::DispatchKeySet rest = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kHookKey);
    if (!state().active.load(std::memory_order_relaxed)) return Op::redispatch(rest, std::forward<A>(args)...);
    const c10::OperatorHandle& op = handle();
    const Plan* plan = plan_or_report(op);
    if (plan == nullptr) return Op::redispatch(rest, std::forward<A>(args)...);
    if (plan->kind != Kind::Access && plan->kind != Kind::Skip) return boxed(keys, std::forward<A>(args)...);
    if (tuning().count_ops) count_op(plan->index, false);
    STAGE_SCOPE(kHookTotal);
    auto run = [&]() -> R { return Op::redispatch(rest, std::forward<A>(args)...); };
    auto for_args = [&](auto&& f) {
      size_t i = 0;
      ((each_tensor_of(args, [&](const at::Tensor& t) { f(i, t); }), ++i), ...);
    };
    // Arguments by reference (or holding no tensor) are the caller's: alive past the op, so watched's view inputs
    // take their extent only if a return copied
    constexpr bool kOutlive = ((std::is_reference_v<A> || !owns_tensors<std::decay_t<A>>) && ...);
    if constexpr (std::is_void_v<R>) {
      watched<kOutlive>(op, *plan, for_args, run, [](auto&&) {});
    } else {
      Returned<R> out;
      watched<kOutlive>(op, *plan, for_args, [&]() { out.run(run); }, [&](auto&& f) { each_return(out.get(), f); });
      return out.take();
    }
  }
};

}  // namespace streamcheck_native

namespace streamcheck_native {
template <class Op>
std::string qualified_name() {  // "aten::add.Tensor"
  std::string overload = Op::overload_name;
  return std::string(Op::name) + (overload.empty() ? "" : "." + overload);
}
}  // namespace streamcheck_native

#define STREAMCHECK_UNBOXED(op) \
  m.impl(streamcheck_native::qualified_name<at::_ops::op>().c_str(), \
         TORCH_FN(streamcheck_native::Unboxed<at::_ops::op>::call))
#define STREAMCHECK_UNBOXED_ZERO2(op) \
  m.impl(streamcheck_native::qualified_name<at::_ops::op>().c_str(), \
         TORCH_FN((streamcheck_native::Unboxed<at::_ops::op, true>::call)))

TORCH_LIBRARY_IMPL(aten, TESTING_ONLY_GenericMode, m) {
  // elementwise and reductions
  STREAMCHECK_UNBOXED(add_Tensor);
  STREAMCHECK_UNBOXED(add__Tensor);
  STREAMCHECK_UNBOXED(add_Scalar);
  STREAMCHECK_UNBOXED(sub_Tensor);
  STREAMCHECK_UNBOXED(sub__Tensor);
  STREAMCHECK_UNBOXED(mul_Tensor);
  STREAMCHECK_UNBOXED(mul__Tensor);
  STREAMCHECK_UNBOXED(mul_Scalar);
  STREAMCHECK_UNBOXED(mul__Scalar);
  STREAMCHECK_UNBOXED(div_Tensor);
  STREAMCHECK_UNBOXED(div__Tensor);
  STREAMCHECK_UNBOXED(div_Scalar);
  STREAMCHECK_UNBOXED(div__Scalar);
  STREAMCHECK_UNBOXED(neg);
  STREAMCHECK_UNBOXED(pow_Tensor_Scalar);
  STREAMCHECK_UNBOXED(rsqrt);
  STREAMCHECK_UNBOXED(sqrt);
  STREAMCHECK_UNBOXED(exp);
  STREAMCHECK_UNBOXED(silu);
  STREAMCHECK_UNBOXED(silu_backward);
  STREAMCHECK_UNBOXED(sigmoid);
  STREAMCHECK_UNBOXED(mean_dim);
  STREAMCHECK_UNBOXED(sum);
  STREAMCHECK_UNBOXED(sum_dim_IntList);
  STREAMCHECK_UNBOXED(addcmul_);
  STREAMCHECK_UNBOXED(addcdiv_);
  STREAMCHECK_UNBOXED(lerp__Scalar);
  // checks and norms (DeepSpeed's overflow check and gradient norm, clip_grad_norm_), comparisons
  STREAMCHECK_UNBOXED_ZERO2(isfinite);
  STREAMCHECK_UNBOXED_ZERO2(linalg_vector_norm);
  STREAMCHECK_UNBOXED_ZERO2(amax);
  STREAMCHECK_UNBOXED_ZERO2(amin);
  STREAMCHECK_UNBOXED_ZERO2(logical_and);
  STREAMCHECK_UNBOXED_ZERO2(logical_not);
  STREAMCHECK_UNBOXED_ZERO2(bitwise_not);
  STREAMCHECK_UNBOXED_ZERO2(any);
  STREAMCHECK_UNBOXED_ZERO2(lt_Scalar);
  // copies, fills, new tensors
  STREAMCHECK_UNBOXED(copy_);
  STREAMCHECK_UNBOXED(fill__Scalar);
  STREAMCHECK_UNBOXED(zero_);
  STREAMCHECK_UNBOXED(clone);
  STREAMCHECK_UNBOXED(_to_copy);
  STREAMCHECK_UNBOXED(to_dtype);
  STREAMCHECK_UNBOXED(to_dtype_layout);
  STREAMCHECK_UNBOXED(to_other);
  STREAMCHECK_UNBOXED(cat);
  STREAMCHECK_UNBOXED_ZERO2(stack);
  STREAMCHECK_UNBOXED_ZERO2(flatten_dense_tensors);
  STREAMCHECK_UNBOXED_ZERO2(unflatten_dense_tensors);
  STREAMCHECK_UNBOXED_ZERO2(to_device);
  STREAMCHECK_UNBOXED_ZERO2(lift_fresh);
  STREAMCHECK_UNBOXED_ZERO2(slice_backward);
  STREAMCHECK_UNBOXED(empty_memory_format);
  STREAMCHECK_UNBOXED(empty_like);
  STREAMCHECK_UNBOXED(zeros);
  STREAMCHECK_UNBOXED(zeros_like);
  STREAMCHECK_UNBOXED(ones_like);
  STREAMCHECK_UNBOXED(new_empty);
  STREAMCHECK_UNBOXED(new_zeros);
  STREAMCHECK_UNBOXED(_local_scalar_dense);
  STREAMCHECK_UNBOXED(item);
  // matrix products, softmax, embedding, loss
  STREAMCHECK_UNBOXED(linear);
  STREAMCHECK_UNBOXED(matmul);
  STREAMCHECK_UNBOXED(mm);
  STREAMCHECK_UNBOXED(bmm);
  STREAMCHECK_UNBOXED(addmm);
  STREAMCHECK_UNBOXED(_softmax);
  STREAMCHECK_UNBOXED(_softmax_backward_data);
  STREAMCHECK_UNBOXED(_log_softmax);
  STREAMCHECK_UNBOXED(_log_softmax_backward_data);
  STREAMCHECK_UNBOXED(embedding);
  STREAMCHECK_UNBOXED(embedding_dense_backward);
  STREAMCHECK_UNBOXED(nll_loss_forward);
  STREAMCHECK_UNBOXED(nll_loss_backward);
  STREAMCHECK_UNBOXED_ZERO2(scaled_dot_product_attention);
  STREAMCHECK_UNBOXED_ZERO2(_scaled_dot_product_cudnn_attention_backward);
  // views
  STREAMCHECK_UNBOXED(view);
  STREAMCHECK_UNBOXED(_unsafe_view);
  STREAMCHECK_UNBOXED(reshape);
  STREAMCHECK_UNBOXED(view_as);
  STREAMCHECK_UNBOXED(t);
  STREAMCHECK_UNBOXED(transpose_int);
  STREAMCHECK_UNBOXED(permute);
  STREAMCHECK_UNBOXED(unsqueeze);
  STREAMCHECK_UNBOXED(squeeze_dim);
  STREAMCHECK_UNBOXED(expand);
  STREAMCHECK_UNBOXED(slice_Tensor);
  STREAMCHECK_UNBOXED(select_int);
  STREAMCHECK_UNBOXED(narrow);
  STREAMCHECK_UNBOXED(as_strided);
  STREAMCHECK_UNBOXED(alias);
  STREAMCHECK_UNBOXED(detach);
  STREAMCHECK_UNBOXED_ZERO2(detach_);
  STREAMCHECK_UNBOXED_ZERO2(_has_compatible_shallow_copy_type);  // `param.data = t` asks it (DeepSpeed, per parameter)
  STREAMCHECK_UNBOXED(contiguous);
  STREAMCHECK_UNBOXED(flatten_using_ints);
  STREAMCHECK_UNBOXED(split_Tensor);
  // optimizers (foreach AdamW and SGD)
  STREAMCHECK_UNBOXED(_foreach_add__List);
  STREAMCHECK_UNBOXED(_foreach_add__Scalar);
  STREAMCHECK_UNBOXED(_foreach_mul__List);
  STREAMCHECK_UNBOXED(_foreach_mul__Scalar);
  STREAMCHECK_UNBOXED(_foreach_div__List);
  STREAMCHECK_UNBOXED(_foreach_lerp__Scalar);
  STREAMCHECK_UNBOXED(_foreach_addcmul__Scalar);
  STREAMCHECK_UNBOXED(_foreach_addcdiv__Scalar);
  STREAMCHECK_UNBOXED(_foreach_sqrt);
  STREAMCHECK_UNBOXED_ZERO2(_foreach_add__Tensor);
  STREAMCHECK_UNBOXED_ZERO2(_foreach_div__ScalarList);
  STREAMCHECK_UNBOXED_ZERO2(_foreach_addcdiv__ScalarList);
}

#undef STREAMCHECK_UNBOXED
#undef STREAMCHECK_UNBOXED_ZERO2
#endif  // STREAMCHECK_NO_UNBOXED
