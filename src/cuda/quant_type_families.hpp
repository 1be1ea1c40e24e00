// The GGUF weight types the quantized matmul kernels read, grouped by family, and the argument check
// their host launchers share. Each launcher names the families it covers (gemm_quant.cu: bf16, legacy
// and k-quants; gemv_quant.cu: every float type, legacy, MXFP4 and k-quants), so its supports() answer
// and its per-type dispatch come from one list.
//
//   using GemmTypes = JoinedTypeList<GgmlTypeList<GgmlType::bf16>, LegacyQuantTypes, KQuantTypes>;
//   GemmTypes::dispatch(p.type, [&]<GgmlType T>() { launch_gemm<T>(p, stream); });
#pragma once

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <string>
#include <string_view>

namespace latte::cuda {

/// A compile-time list of GGUF types.
template <GgmlType... Types>
struct GgmlTypeList {
  /// Whether `type` is in the list.
  static constexpr bool contains(GgmlType type) noexcept { return ((type == Types) || ...); }
  /// Calls `f.template operator()<T>()` for the T in the list equal to `type`; false when none is.
  template <class F>
  static bool dispatch(GgmlType type, F&& f) {
    return ((type == Types && (f.template operator()<Types>(), true)) || ...);
  }
};

template <class... Lists>
struct JoinTypeLists;
template <GgmlType... Types>
struct JoinTypeLists<GgmlTypeList<Types...>> {
  using type = GgmlTypeList<Types...>;
};
template <GgmlType... First, GgmlType... Second, class... Rest>
struct JoinTypeLists<GgmlTypeList<First...>, GgmlTypeList<Second...>, Rest...>
    : JoinTypeLists<GgmlTypeList<First..., Second...>, Rest...> {};
/// The types of all `Lists`, in order.
template <class... Lists>
using JoinedTypeList = typename JoinTypeLists<Lists...>::type;

/// Unquantized rows. The GEMV reads all three; the GEMM stages bf16 tiles and takes only bf16.
using FloatTypes = GgmlTypeList<GgmlType::f32, GgmlType::f16, GgmlType::bf16>;
/// The legacy 32-value blocks with one scale (and a minimum for the _1 types).
using LegacyQuantTypes = GgmlTypeList<GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0>;
/// The 256-value k-quant super-blocks.
using KQuantTypes = GgmlTypeList<GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k>;
/// 32 E2M1 values with one E8M0 scale. The GEMV reads it; the GEMM does not.
using Mxfp4Types = GgmlTypeList<GgmlType::mxfp4>;
/// 4-bit codes into the 16 non-uniform levels k_iq4_levels: blocks of 32 with one scale (IQ4_NL) and super-blocks
/// of 256 with 6-bit sub-block scales (IQ4_XS). The GEMV and the bf16 dequantization read them; the GEMM does not.
using Iq4Types = GgmlTypeList<GgmlType::iq4_nl, GgmlType::iq4_xs>;

/// The precondition check of one host launcher:
///   constexpr ArgumentCheck require_arg{"gemm_quant"};
///   require_arg(p.k > 0, "k must be positive");  // else Error(invalid_argument) "gemm_quant: k must be positive"
class ArgumentCheck {
 public:
  explicit constexpr ArgumentCheck(std::string_view launcher) noexcept : launcher_(launcher) {}
  void operator()(bool ok, const std::string& what) const {
    if (!ok) throw Error(ErrorCode::invalid_argument, std::string(launcher_) + ": " + what);
  }

 private:
  std::string_view launcher_;
};

}  // namespace latte::cuda
