// Model: load a GGUF file, read its config, audit and map its tensors.
#include "core/environment.hpp"
#include "model/fingerprint.hpp"
#include "model/model_state.hpp"
#include "model/weights.hpp"
#include "parallel/launch_model.hpp"
#include "parallel/shard_plan.hpp"
#include "parallel/tensor_parallel_model.hpp"

#include <latte/diagnostics.hpp>
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <optional>

#ifdef LATTE_WITH_CUDA
#include "cuda/device_weights.hpp"
#include "cuda/tensor_parallel_cuda.hpp"
#endif

namespace latte {

namespace {

void report_progress(const ModelParams& params, float fraction) {
  if (params.on_progress && !params.on_progress(fraction)) {
    throw Error(ErrorCode::cancelled, "model load cancelled by the progress callback");
  }
}

}  // namespace

Model Model::load(const std::string& path, ModelParams params) {
  report_progress(params, 0.0f);
  return from_file(gguf::File::open(path), std::move(params));
}

Model Model::from_file(gguf::File file, ModelParams params) {
  report_progress(params, 0.0f);
  latte::detail::check_environment();  // a bad LATTE_* value fails here, not inside a step
  if (params.tensor_parallel < 1) {
    throw Error(ErrorCode::invalid_argument,
                "tensor_parallel must be at least 1 (got " + std::to_string(params.tensor_parallel) + ")");
  }
  // One rank per process: the degree and the GPU come from the launch variables.
  std::optional<detail::ModelLaunch> launch;
  if (params.tensor_parallel_from_launch) {
    launch = detail::resolve_model_launch(params);
    params.tensor_parallel = launch->tensor_parallel;
    params.device = launch->device;
  }
#ifndef LATTE_WITH_CUDA
  if (!params.device.is_cpu()) {
    throw Error(ErrorCode::unsupported, "device " + params.device.to_string() +
                                            ": latte was built without CUDA (only the CPU forward pass is available)");
  }
#else
  // One GPU per rank from the given one, and NCCL between them: checked before anything is read.
  if (launch && params.tensor_parallel > 1) {
    cuda::require_launch_rank_device(launch->env);
  } else if (params.tensor_parallel > 1 && params.device.is_cuda()) {
    cuda::require_tensor_parallel_devices(params.device.index, params.tensor_parallel);
  }
#endif
  auto state = std::make_shared<detail::ModelState>(std::move(file), params.device);
  state->config = ModelConfig::from_gguf(state->file);
  report_progress(params, 0.3f);
  state->audit = audit_weights(state->file, state->config);
  std::optional<detail::ShardPlan> plan;
  if (params.tensor_parallel > 1 && state->audit.ok()) {
    // From the tensor table alone: a degree the model cannot honour fails before any weight is read.
    plan = detail::plan_tensor_parallel(state->file, state->config,
                                        {.world_size = params.tensor_parallel, .moe = params.moe_split});
  }
  state->weights = detail::map_weights(state->file, state->config, state->audit);
  state->fingerprint = detail::model_fingerprint(state->file);
  if (plan) {
    // A process of a multi-process launch cuts (and later reads) only its own rank's shard.
    state->tensor_parallel =
        detail::shard_model(state->config, state->weights, std::move(*plan), launch ? launch->env.rank : -1);
  }
#ifdef LATTE_WITH_CUDA
  if (params.device.is_cuda()) {
    report_progress(params, 0.4f);
    // Kernels that are wrong on this architecture/driver are caught before the first forward pass
    // (once per device per process; the verdict is cached per user; LATTE_NO_SELFTEST=1 skips it).
    if (state->tensor_parallel && launch) {
      // This process's rank only, to cuda:(local rank); the group is joined through the id file.
      state->cuda_tensor_parallel = cuda::load_launch_rank_devices(*state, launch->env);
      diagnostics::ensure_selftest(params.device);
    } else if (state->tensor_parallel) {
      // Each rank uploads only its shard, to cuda:(index + rank).
      state->cuda_tensor_parallel = cuda::load_tensor_parallel_devices(*state, params.device.index);
      for (int r = 0; r < params.tensor_parallel; ++r)
        diagnostics::ensure_selftest(Device::cuda(params.device.index + r));
    } else {
      state->device_weights = cuda::upload_weights(*state, params.device.index);
      diagnostics::ensure_selftest(params.device);
    }
  }
#endif
  if (state->file.find("tokenizer.ggml.tokens")) {
    try {
      state->tokenizer = Tokenizer::from_gguf(state->file);
    } catch (const Error& e) {
      state->tokenizer_error = e;
    }
  } else {
    state->tokenizer_error =
        Error(ErrorCode::not_found, state->file.path() + " has no tokenizer (tokenizer.ggml.tokens)");
  }
  report_progress(params, 1.0f);
  return Model(std::move(state));
}

const ModelConfig& Model::config() const noexcept { return state_->config; }
const gguf::File& Model::file() const noexcept { return state_->file; }
const WeightAudit& Model::audit() const noexcept { return state_->audit; }
Device Model::device() const noexcept { return state_->device; }
uint64_t Model::fingerprint() const noexcept { return state_->fingerprint; }

const Tokenizer& Model::tokenizer() const {
  if (!state_->tokenizer) throw state_->tokenizer_error;
  return *state_->tokenizer;
}

}  // namespace latte
