// The LATTE_* variables latte reads (see environment.hpp), and their strict readers.
#include "core/environment.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace latte::detail {
namespace {

using K = EnvKind;

constexpr EnvVariable flag(std::string_view name, std::string_view meaning) {
  return {.name = name, .kind = K::flag, .meaning = meaning};
}
constexpr EnvVariable integer(std::string_view name, double min, double max, std::string_view meaning) {
  return {.name = name, .kind = K::integer, .min = min, .max = max, .meaning = meaning};
}
constexpr EnvVariable real(std::string_view name, double min, double max, std::string_view meaning) {
  return {.name = name, .kind = K::real, .min = min, .max = max, .meaning = meaning};
}
constexpr EnvVariable choice(std::string_view name, std::string_view choices, std::string_view meaning) {
  return {.name = name, .kind = K::choice, .choices = choices, .meaning = meaning};
}
constexpr EnvVariable text(std::string_view name, std::string_view meaning) {
  return {.name = name, .kind = K::text, .meaning = meaning};
}

// In name order (a test checks it, and that docs/environment.md lists every name).
constexpr std::array kVariables = {
    text("LATTE_ATTENTION", "attention backend of sessions that ask for auto: mla or standard"),
    integer("LATTE_BLAS_MIN_ROWS", 9, 4096,
            "CUDA: rows from which a dense quantized product dequantizes its matrix to bf16 for cuBLAS (17)"),
    flag("LATTE_COMBINE_NORM", "CUDA: the MoE combine also normalises for the next attention (0)"),
    flag("LATTE_CUDA_GRAPHS", "CUDA: decode steps replay captured graphs (1; 0: eager launches)"),
    flag("LATTE_CUDA_PORTABLE", "CUDA: the portable kernels even on Hopper (0)"),
    integer("LATTE_DENSE_BF16_MB", 0, 1 << 20,
            "CUDA: most MB of bf16 copies of the dense matrices for steps of many rows (4096; 0: none)"),
    integer("LATTE_DENSE_BF16_ROWS", 2, 4096, "CUDA: fewest rows of a product over those copies (5)"),
    flag("LATTE_DIRECT_BF16",
         "CUDA: kernels write the bf16 rows the next cuBLAS product reads, no conversion launches (1)"),
    flag("LATTE_FUSED_DECODE", "CUDA: one-sequence mla decode steps as one persistent kernel (0, experimental)"),
    integer("LATTE_GEMV_DENSE_ROWS", 9, 128,
            "CUDA: most rows of a dense product on the tensor-core GEMV over int8 records (64)"),
    flag("LATTE_GEMV_F16", "CUDA: Q4_K expert groups of 9-16 tokens on the fp16 tensor cores (1; 0: int8)"),
    flag("LATTE_GEMV_INT8", "CUDA: quantized GEMVs read int8 copies of their input (1; 0: fp32)"),
    flag("LATTE_GEMV_MMA", "CUDA: expert-group GEMVs of 3-8 tokens on the int8 tensor cores (1; 0: dp4a)"),
    flag("LATTE_GEMV_MMA_DEAL", "CUDA: gathered tensor-core GEMV groups dealt over one even wave of blocks (1)"),
    integer("LATTE_GEMV_MMA_DENSE_MIN", 3, 65, "CUDA: fewest rows of a dense tensor-core GEMV launch (5)"),
    integer("LATTE_GEMV_MMA_MIN_TOKENS", 1, 8, "CUDA: fewest tokens per block of a tensor-core expert GEMV (3)"),
    flag("LATTE_GEMV_MMA_PAIRS",
         "CUDA: 16-token groups of the staged types dealt as (group, tile) pairs over one wave (1)"),
    flag("LATTE_GEMV_MMA_Q6K", "CUDA: Q6_K on the tensor-core GEMV (1; 0: dp4a)"),
    flag("LATTE_GEMV_MMA_ROWS",
         "CUDA: dense products of 5 to LATTE_GEMV_DENSE_ROWS rows as one tensor-core GEMV launch (1)"),
    flag("LATTE_GEMV_MMA_SPLIT", "CUDA: K split over a block's warps where a dense launch has few tiles (1)"),
    flag("LATTE_GEMV_MMA_WIDE_GROUPS",
         "CUDA: expert groups of 9-16 tokens on the tensor-core GEMV's 16-token build (1)"),
    flag("LATTE_GEMV_NORM", "CUDA: the one-token attention projection normalises its own input (1)"),
    flag("LATTE_GEMV_PASSES", "CUDA: products of 9-16 rows as split-int8 GEMV passes (1; 0: the GEMM)"),
    flag("LATTE_GEMV_SELF_QUANTIZE", "CUDA: one-token GEMVs make their input's int8 copy themselves (1)"),
    flag("LATTE_GEMV_STAGE_X", "CUDA: 0 is LATTE_GEMV_X=direct (older name)"),
    real("LATTE_GEMV_WAVES", 0.01, 1024, "CUDA: grid cap of the fp32 GEMV, in waves of resident blocks (1)"),
    flag("LATTE_GEMV_WIDE_RECORDS",
         "CUDA: 2-8 rows too wide for the dp4a GEMV's int8 copies (a dense FFN's down) on the tensor cores (1)"),
    choice("LATTE_GEMV_X", "rows|warp|direct", "CUDA: how the fp32 GEMV reads its input (rows)"),
    integer("LATTE_GEMV_X_ASYNC", 0, 8, "CUDA: GEMV blocks of this many tokens or more copy them at once (8; 0 never)"),
    flag("LATTE_LOGITS_CHUNKS", "CUDA: a step's logits leave the device in 16-row chunks, scattered as they land (1)"),
    integer("LATTE_LOGITS_COPY_THREADS", 1, 256,
            "CUDA: threads copying a batch's logits to its sessions (cores, 1-16)"),
    flag("LATTE_MLA_CLUSTER", "CUDA: MLA decode splits may merge inside a thread-block cluster (1)"),
    choice("LATTE_MLA_DECODE_TILE", "64|32",
           "CUDA: positions per tile of the 16-row MLA decode kernel: 64 (2 stages) or 32 (4 stages) (64)"),
    flag("LATTE_MLA_DISABLE", "attention backend of sessions that ask for auto is standard (0)"),
    flag("LATTE_MLA_EARLY_TILES",
         "CUDA: one-token MLA decode steps copy their first tiles' earlier cache rows before the kernels before them "
         "end (1)"),
    flag("LATTE_MLA_HEADS_BLAS", "CUDA: per-head W_UK / W_UV of many rows as one batched cuBLAS product (1)"),
    integer("LATTE_MLA_HEADS_BLAS_ROWS", 1, 1 << 20,
            "CUDA: fewest rows of fp32 W_UK / W_UV products over fp32 copies, below LATTE_BLAS_MIN_ROWS (2)"),
    integer("LATTE_MLA_HEADS_F32_MB", 0, 1 << 20,
            "CUDA: most MB of fp32 copies of every layer's W_UK / W_UV for cuBLAS (1024; 0: none)"),
    flag("LATTE_MLA_HEADS_KERNEL",
         "CUDA: those fp32 W_UK / W_UV products as one latte launch each, writing bf16 too (1; 0: cuBLAS)"),
    choice("LATTE_MLA_PREFILL", "auto|absorbed", "CUDA: long mla prefill chunks decompress K and V (auto)"),
    integer("LATTE_MLA_UK_BESIDE_ROPE", 0, 8, "CUDA: steps of up to this many rows run W_UK beside the rope (1)"),
    flag("LATTE_MLA_UV_INT8", "CUDA: the per-head W_UV reads int8 planes of the attention output (1)"),
    flag("LATTE_MOE_CONCURRENT_SHARED", "CUDA: the shared expert beside the routed ones, steps <= 64 rows (1)"),
    integer("LATTE_MOE_DOWN_QUANTIZE", 0, 16,
            "CUDA: most tokens per expert group whose routed down quantizes its activations itself (0)"),
    integer("LATTE_MOE_GEMV_ROWS", 8, 1 << 20, "CUDA: most rows whose routed experts run as GEMV chunks (128)"),
    integer("LATTE_MOE_GEMV_TOKENS", 8, 128, "CUDA: most rows per MoE GEMV pass (128)"),
    integer("LATTE_MOE_GROUP_TOKENS", 1, 16, "CUDA: tokens per expert GEMV group (sized to the step)"),
    flag("LATTE_MOE_ROUTE_IN_GEMV", "CUDA: a one-token step chooses its experts inside the first expert GEMV (1)"),
    flag("LATTE_MOE_ROUTE_IN_SORT", "CUDA: MoE decode steps of up to 256 choices route inside the sort launch (1)"),
    flag("LATTE_NORM_BF16", "CUDA: the attention norm writes bf16 rows for a projection over a bf16 copy (1)"),
    integer("LATTE_NORM_ROUTER", 0, 8, "CUDA: steps from this many rows compute router logits in the FFN norm (2)"),
    flag("LATTE_NO_SELFTEST", "CUDA: skip the first-load kernel self-test (0)"),
    integer("LATTE_OUTPUT_BF16_MB", 0, 1 << 20,
            "CUDA: most MB of a bf16 copy of the output head for logits of many rows (2048; 0: none)"),
    integer("LATTE_OUTPUT_BF16_ROWS", 2, 1 << 20,
            "CUDA: fewest logit rows that multiply the output head's bf16 copy (5)"),
    flag("LATTE_PDL", "CUDA: kernels may start while the one before drains (1)"),
    flag("LATTE_ROPE_WRITES_CACHE", "CUDA: the mla rope launch writes the new cache rows (1)"),
    integer("LATTE_STEP_STAGES", 3, 32, "CUDA, fused decode: cap on the shared-memory ring's stages"),
    integer("LATTE_STEP_STAGE_KB", 16, 64, "CUDA, fused decode: ring stage size in KB (16)"),
    flag("LATTE_STEP_TIMING", "CUDA, fused decode: per-phase clocks (0)"),
    text("LATTE_TP_ID_FILE", "tensor-parallel launch: file through which the ranks exchange the NCCL id"),
    text("LATTE_TP_LOCAL_RANK", "tensor-parallel launch: this process's GPU on its host"),
    choice("LATTE_TP_OUTPUT", "replicated|split", "tensor parallelism: every rank holds the output head, or a slice"),
    text("LATTE_TP_RANK", "tensor-parallel launch: this process's rank"),
    integer("LATTE_TP_TIMEOUT_S", 0, 1e9, "tensor parallelism: seconds a rank waits for its peers (600; 0 forever)"),
    text("LATTE_TP_WORLD", "tensor-parallel launch: number of processes"),
};

std::string describe_accepted(const EnvVariable& v) {
  auto number = [](double x) {
    if (x == std::floor(x) && std::abs(x) < 1e15) return std::to_string(static_cast<long long>(x));
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    return s;
  };
  switch (v.kind) {
    case K::flag:
      return "0 or 1 (also off/on, false/true, no/yes)";
    case K::integer:
      return "an integer from " + number(v.min) + " to " + number(v.max);
    case K::real:
      return "a number from " + number(v.min) + " to " + number(v.max);
    case K::choice: {
      std::string s(v.choices);
      std::replace(s.begin(), s.end(), '|', ',');
      return "one of " + s;
    }
    case K::text:
      break;
  }
  return "text";
}

[[noreturn]] void reject(const EnvVariable& v, std::string_view value) {
  throw Error(ErrorCode::invalid_argument, "environment variable " + std::string(v.name) + "='" + std::string(value) +
                                               "': expected " + describe_accepted(v) + " (" + std::string(v.meaning) +
                                               ")");
}

/// The variable's value, or nullptr when it is unset or empty (both mean the default).
const char* value_of(const EnvVariable& v) {
  const char* s = std::getenv(std::string(v.name).c_str());
  return s && *s ? s : nullptr;
}

bool lower_equal(std::string_view a, std::string_view lower) {
  return a.size() == lower.size() && std::equal(a.begin(), a.end(), lower.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == y;
         });
}

bool parse_flag(const EnvVariable& v, std::string_view s) {
  for (std::string_view on : {"1", "on", "true", "yes"}) {
    if (lower_equal(s, on)) return true;
  }
  for (std::string_view off : {"0", "off", "false", "no"}) {
    if (lower_equal(s, off)) return false;
  }
  reject(v, s);
}

double parse_number(const EnvVariable& v, std::string_view s) {
  double x = 0;
  if (v.kind == K::integer) {
    long long n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size()) reject(v, s);
    x = static_cast<double>(n);
  } else {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(x)) reject(v, s);
  }
  if (x < v.min || x > v.max) reject(v, s);
  return x;
}

void check_choice(const EnvVariable& v, std::string_view s) {
  std::string_view rest = v.choices;
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    if (rest.substr(0, bar) == s) return;
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  reject(v, s);
}

const EnvVariable& expect(std::string_view name, EnvKind kind) {
  const EnvVariable& v = env_variable(name);
  if (v.kind != kind) {
    throw Error(ErrorCode::internal, "environment variable " + std::string(name) + " is read as another kind");
  }
  return v;
}

}  // namespace

std::span<const EnvVariable> env_variables() noexcept { return kVariables; }

const EnvVariable& env_variable(std::string_view name) {
  for (const EnvVariable& v : kVariables) {
    if (v.name == name) return v;
  }
  throw Error(ErrorCode::internal, "environment variable " + std::string(name) + " is not in latte's table");
}

bool env_flag(std::string_view name, bool fallback) {
  const EnvVariable& v = expect(name, K::flag);
  const char* s = value_of(v);
  return s ? parse_flag(v, s) : fallback;
}

int env_int(std::string_view name, int fallback) {
  const EnvVariable& v = expect(name, K::integer);
  const char* s = value_of(v);
  return s ? static_cast<int>(parse_number(v, s)) : fallback;
}

double env_real(std::string_view name, double fallback) {
  const EnvVariable& v = expect(name, K::real);
  const char* s = value_of(v);
  return s ? parse_number(v, s) : fallback;
}

std::string env_choice(std::string_view name, std::string_view fallback) {
  const EnvVariable& v = expect(name, K::choice);
  const char* s = value_of(v);
  if (!s) return std::string(fallback);
  check_choice(v, s);
  return s;
}

void check_environment() {
  for (const EnvVariable& v : kVariables) {
    const char* s = value_of(v);
    if (!s) continue;
    switch (v.kind) {
      case K::flag:
        (void)parse_flag(v, s);
        break;
      case K::integer:
      case K::real:
        (void)parse_number(v, s);
        break;
      case K::choice:
        check_choice(v, s);
        break;
      case K::text:
        break;
    }
  }
}

std::string environment_summary() {
  std::string out;
  for (const EnvVariable& v : kVariables) {
    const char* s = value_of(v);
    if (!s) continue;
    if (!out.empty()) out += ' ';
    out += std::string(v.name) + "=" + s;
  }
  return out;
}

}  // namespace latte::detail
