// Activation taps: the forward pass's sink, a recorder, and the tap-by-tap comparison.
#include "model/forward.hpp"

#include <latte/diagnostics.hpp>
#include <latte/error.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>

namespace latte {

namespace detail {

void TapSink::emit(std::string_view name, int layer, std::initializer_list<int64_t> shape, const float* data) const {
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  const Tap tap{.name = name,
                .layer = layer,
                .shape = std::span<const int64_t>(shape.begin(), shape.size()),
                .data = std::span<const float>(data, static_cast<size_t>(n))};
  observer_.on_tap(tap);
}

void TapSink::emit_rows(std::string_view name, int layer, std::initializer_list<int64_t> shape, const float* first,
                        int64_t n_rows, int64_t row_width, int64_t row_stride) const {
  gather_.resize(static_cast<size_t>(n_rows * row_width));
  for (int64_t r = 0; r < n_rows; ++r) {
    std::copy_n(first + r * row_stride, row_width, gather_.data() + r * row_width);
  }
  emit(name, layer, shape, gather_.data());
}

std::string TapSink::block_name(int layer, std::string_view tap) {
  std::string name = "blk." + std::to_string(layer) + ".";
  name += tap;
  return name;
}

}  // namespace detail

namespace diagnostics {

TapObserver TapRecorder::observer() {
  return {.wants = {}, .on_tap = [this](const Tap& tap) {
            auto it = std::find_if(taps_.begin(), taps_.end(), [&](const TapRecord& r) { return r.name == tap.name; });
            if (it == taps_.end()) {
              taps_.push_back({.name = std::string(tap.name),
                               .layer = tap.layer,
                               .shape = std::vector<int64_t>(tap.shape.begin(), tap.shape.end()),
                               .data = std::vector<float>(tap.data.begin(), tap.data.end())});
              return;
            }
            // A later step of the same eval: append its rows.
            if (it->shape.size() != tap.shape.size() ||
                !std::equal(it->shape.begin() + 1, it->shape.end(), tap.shape.begin() + 1)) {
              throw Error(ErrorCode::internal, "tap " + it->name + " changed its row shape between steps");
            }
            it->shape[0] += tap.shape[0];
            it->data.insert(it->data.end(), tap.data.begin(), tap.data.end());
          }};
}

std::vector<TapRecord> record_taps(const Model& model, const SessionParams& params, std::span<const Token> tokens) {
  SessionParams p = params;
  p.logits_all = true;
  p.n_ctx = std::max(p.n_ctx, static_cast<int>(tokens.size()));
  Session session(model, p);
  TapRecorder recorder;
  session.set_tap_observer(recorder.observer());
  session.eval(tokens);
  return recorder.taps();
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

TapComparison compare_one(const TapRecord& a, const TapRecord& b, double bound) {
  TapComparison c{.name = a.name, .rel_error = 0, .cosine = 1, .agrees = true, .note = {}};
  if (a.shape != b.shape) {
    c.agrees = false;
    c.rel_error = std::numeric_limits<double>::infinity();
    c.cosine = 0;
    c.note = "shape " + shape_text(a.shape) + " vs " + shape_text(b.shape);
    return c;
  }
  double diff2 = 0, a2 = 0, b2 = 0, ab = 0;
  size_t differing = 0;
  bool finite = true;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const double x = a.data[i], y = b.data[i];
    if (!std::isfinite(x) || !std::isfinite(y)) finite = false;
    diff2 += (x - y) * (x - y);
    a2 += x * x;
    b2 += y * y;
    ab += x * y;
    differing += x != y;
  }
  c.cosine = a2 == 0 && b2 == 0 ? 1.0 : (a2 == 0 || b2 == 0 ? 0.0 : ab / std::sqrt(a2 * b2));
  if (!finite) {
    c.rel_error = std::numeric_limits<double>::infinity();
    c.note = "non-finite values";
  } else if (ends_with(a.name, "expert_ids") || ends_with(a.name, "index_selection")) {
    c.rel_error = a.data.empty() ? 0.0 : static_cast<double>(differing) / static_cast<double>(a.data.size());
  } else {
    c.rel_error = b2 == 0 ? (diff2 == 0 ? 0.0 : std::numeric_limits<double>::infinity()) : std::sqrt(diff2 / b2);
  }
  c.agrees = c.rel_error <= bound;
  return c;
}

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

ComparisonReport compare_taps(std::span<const TapRecord> a, std::span<const TapRecord> b, double bound) {
  std::map<std::string, const TapRecord*, std::less<>> by_name;
  for (const TapRecord& r : b) by_name.emplace(r.name, &r);
  ComparisonReport report{.bound = bound, .taps = {}, .first_divergence = std::nullopt};
  for (const TapRecord& r : a) {
    const auto it = by_name.find(r.name);
    if (it == by_name.end()) {
      report.taps.push_back({.name = r.name, .rel_error = 0, .cosine = 0, .agrees = true, .note = "missing in B"});
      continue;
    }
    report.taps.push_back(compare_one(r, *it->second, bound));
    if (!report.taps.back().agrees && !report.first_divergence) report.first_divergence = report.taps.size() - 1;
  }
  return report;
}

std::string ComparisonReport::summary() const {
  if (!first_divergence) {
    size_t compared = 0;
    for (const TapComparison& t : taps) compared += t.note != "missing in B";
    return "all " + std::to_string(compared) + " taps agree (bound " + short_number(bound) + ")";
  }
  const TapComparison& t = taps[*first_divergence];
  std::string s =
      "first divergence: " + t.name + ", rel err " + short_number(t.rel_error) + " (bound " + short_number(bound) + ")";
  if (!t.note.empty()) s += " [" + t.note + "]";
  s += *first_divergence == 0 ? "; it is the first tap" : "; upstream taps agree";
  return s;
}

}  // namespace diagnostics
}  // namespace latte
