// Model: load a GGUF file, read its config, audit and map its tensors.
#include "model/fingerprint.hpp"
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
  auto state = std::make_shared<detail::ModelState>(std::move(file), params.device);
  state->config = ModelConfig::from_gguf(state->file);
  report_progress(params, 0.3f);
  state->audit = audit_weights(state->file, state->config);
  state->weights = detail::map_weights(state->file, state->config, state->audit);
  state->fingerprint = detail::model_fingerprint(state->file);
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
