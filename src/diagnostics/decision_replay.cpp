#include "diagnostics/decision_replay.hpp"

#include "model/architecture.hpp"
#include "model/model_state.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace latte::detail {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_decision_tap(std::string_view name) {
  return name == "token_embd" || ends_with(name, ".expert_ids") || ends_with(name, ".index_selection");
}

}  // namespace

TapObserver DecisionRecorder::observer() {
  return {.wants =
              [this](std::string_view name) {
                return is_decision_tap(name) || (inner_.on_tap && (!inner_.wants || inner_.wants(name)));
              },
          .on_tap = [this](const Tap& tap) { on_tap(tap); }};
}

void DecisionRecorder::on_tap(const Tap& tap) {
  if (tap.name == "token_embd") {
    step_first_ = next_position_;
    next_position_ += static_cast<int>(tap.shape[0]);
  } else if (is_decision_tap(tap.name)) {
    const auto kind = ends_with(tap.name, ".expert_ids") ? DecisionKind::experts : DecisionKind::selection;
    if (tap.shape.size() != 2)
      throw Error(ErrorCode::internal, "decision tap " + std::string(tap.name) + " is not 2-d");
    const auto rows = static_cast<size_t>(tap.shape[0]), width = static_cast<size_t>(tap.shape[1]);
    for (size_t r = 0; r < rows; ++r) {
      std::vector<int32_t> values(width);
      for (size_t j = 0; j < width; ++j) values[j] = static_cast<int32_t>(std::lround(tap.data[r * width + j]));
      const int position = step_first_ + static_cast<int>(r);
      recorded_[{kind, tap.layer, position}] = values;
      decisions_.force(kind, tap.layer, position, std::move(values));
    }
  }
  if (inner_.on_tap && (!inner_.wants || inner_.wants(tap.name))) inner_.on_tap(tap);
}

int DecisionRecorder::first_difference(const DecisionRecorder& other) const {
  int first = -1;
  auto note = [&](int position) { first = first < 0 ? position : std::min(first, position); };
  for (const auto& [key, values] : recorded_) {
    const auto it = other.recorded_.find(key);
    if (it == other.recorded_.end() || it->second != values) note(std::get<2>(key));
  }
  for (const auto& [key, values] : other.recorded_) {
    if (!recorded_.contains(key)) note(std::get<2>(key));
  }
  return first;
}

CpuStepRun::CpuStepRun(const Model& model, const std::string& backend, int n_ctx, int n_threads)
    : model_(model), pool_(n_threads), runner_(pool_.runner()) {
  if (model.device().is_cuda()) throw Error(ErrorCode::invalid_argument, "CpuStepRun needs a model loaded on the CPU");
  const ModelConfig& c = model_.config();
  backend_ = AttentionRegistry::instance().create(backend, c, model_.device());
  backend_->prepare(model_.state().weights.attention_weights());
  cache_ = std::make_unique<KvCache>(c.n_layer_main(), backend_->kv_layout(), c.has_indexer() ? c.indexer.head_dim : 0,
                                     n_ctx);
  forward_ = architecture_ops(c.arch).create_cpu_forward(model_.state(), *backend_, runner_);
}

std::vector<float> CpuStepRun::eval(std::span<const Token> tokens, ForcedDecisions* forced, const TapObserver* taps) {
  const int T = static_cast<int>(tokens.size());
  std::vector<float> logits(static_cast<size_t>(T) * static_cast<size_t>(model_.config().n_vocab));
  std::vector<int> rows(static_cast<size_t>(T));
  std::iota(rows.begin(), rows.end(), 0);
  const BatchSequence seq{.cache = cache_.get(), .first_row = 0, .n_tokens = T};
  std::unique_ptr<TapSink> sink;
  if (taps) sink = std::make_unique<TapSink>(*taps);
  forward_->run({.tokens = tokens,
                 .sequences = std::span(&seq, 1),
                 .logit_rows = rows,
                 .logits = logits.data(),
                 .taps = sink.get(),
                 .forced = forced});
  return logits;
}

}  // namespace latte::detail
