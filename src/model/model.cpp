// Model: load a GGUF file, read its config, audit and map its tensors.
#include "model/model_state.hpp"
#include "model/weights.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

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
  if (params.tensor_parallel != 1) {
    throw Error(
        params.tensor_parallel < 1 ? ErrorCode::invalid_argument : ErrorCode::unsupported,
        "tensor_parallel = " + std::to_string(params.tensor_parallel) + ": this build runs a model on one device only");
  }
  if (!params.device.is_cpu()) {
    throw Error(ErrorCode::unsupported,
                "device " + params.device.to_string() + ": only the CPU forward pass is available in this build");
  }
  auto state = std::make_shared<detail::ModelState>(
      detail::ModelState{.file = std::move(file), .config = {}, .audit = {}, .weights = {}, .device = params.device});
  state->config = ModelConfig::from_gguf(state->file);
  report_progress(params, 0.3f);
  state->audit = audit_weights(state->file, state->config);
  state->weights = detail::map_weights(state->file, state->config, state->audit);
  report_progress(params, 1.0f);
  return Model(std::move(state));
}

const ModelConfig& Model::config() const noexcept { return state_->config; }
const gguf::File& Model::file() const noexcept { return state_->file; }
const WeightAudit& Model::audit() const noexcept { return state_->audit; }
Device Model::device() const noexcept { return state_->device; }

}  // namespace latte
