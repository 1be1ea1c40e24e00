// The process-wide attention backend registry and the backend selection rules.
#include "attention/cpu_backends.hpp"
#include "core/environment.hpp"

#ifdef LATTE_WITH_CUDA
#include "cuda/cuda_attention.hpp"
#endif

#include <latte/attention.hpp>
#include <latte/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>

namespace latte {

size_t KvLayout::bytes_per_token() const {
  return static_cast<size_t>(row_bytes(element_type, static_cast<uint64_t>(values_per_token)));
}

struct AttentionRegistry::Impl {
  mutable std::mutex mutex;
  std::vector<AttentionBackendInfo> entries;  // most recent first
};

AttentionRegistry::AttentionRegistry() : impl_(std::make_unique<Impl>()) {
  impl_->entries.push_back(detail::cpu_standard_backend_info());
  impl_->entries.insert(impl_->entries.begin(), detail::cpu_mla_backend_info());
#ifdef LATTE_WITH_CUDA
  impl_->entries.insert(impl_->entries.begin(), cuda::cuda_standard_backend_info());
  impl_->entries.insert(impl_->entries.begin(), cuda::cuda_mla_backend_info());
#endif
}

AttentionRegistry& AttentionRegistry::instance() {
  static AttentionRegistry registry;
  return registry;
}

void AttentionRegistry::add(AttentionBackendInfo info) {
  if (info.name.empty() || !info.create) {
    throw Error(ErrorCode::invalid_argument, "attention backend registration needs a name and a create function");
  }
  if (!info.supports) info.supports = [](const ModelConfig&, Device) { return true; };
  std::lock_guard lock(impl_->mutex);
  impl_->entries.insert(impl_->entries.begin(), std::move(info));
}

int AttentionRegistry::remove(std::string_view name) {
  std::lock_guard lock(impl_->mutex);
  const auto before = impl_->entries.size();
  std::erase_if(impl_->entries, [&](const AttentionBackendInfo& e) { return e.name == name; });
  return static_cast<int>(before - impl_->entries.size());
}

std::vector<AttentionBackendInfo> AttentionRegistry::list() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->entries;
}

std::vector<std::string> AttentionRegistry::names() const {
  std::lock_guard lock(impl_->mutex);
  std::set<std::string> names;
  for (const auto& e : impl_->entries) names.insert(e.name);
  return {names.begin(), names.end()};
}

namespace {
std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

std::unique_ptr<AttentionBackend> AttentionRegistry::create(std::string_view name, const ModelConfig& config,
                                                            Device device) const {
  AttentionBackendInfo chosen;
  bool known = false;
  {
    std::lock_guard lock(impl_->mutex);
    for (const auto& e : impl_->entries) {
      if (e.name != name) continue;
      known = true;
      if (e.supports(config, device)) {
        chosen = e;
        break;
      }
    }
  }
  if (!known) {
    throw Error(ErrorCode::not_found,
                "unknown attention backend '" + std::string(name) + "' (available: " + joined(names()) + ")");
  }
  if (!chosen.create) {
    throw Error(ErrorCode::unsupported, "attention backend '" + std::string(name) + "' does not support " +
                                            std::string(architecture_name(config.arch)) + " models on " +
                                            device.to_string());
  }
  auto backend = chosen.create(config, device);
  if (!backend) throw Error(ErrorCode::internal, "attention backend '" + std::string(name) + "' factory returned null");
  return backend;
}

std::string resolve_attention_backend(std::string_view requested, const ModelConfig& config, Device device) {
  auto unset = [](std::string_view name) { return name.empty() || name == "auto"; };
  std::string name(requested);
  if (unset(name)) {
    const char* env = std::getenv("LATTE_ATTENTION");
    name = env ? env : "";
  }
  if (unset(name)) {
    if (latte::detail::env_flag("LATTE_MLA_DISABLE", false)) name = "standard";
  }
  if (unset(name)) {
    // auto: the absorbed backend wherever one supports the model (on the CPU both are exact in
    // fp32 and mla keeps the small L + R cache); else standard.
    const auto entries = AttentionRegistry::instance().list();
    const bool mla = std::any_of(entries.begin(), entries.end(), [&](const AttentionBackendInfo& e) {
      return e.name == "mla" && e.supports(config, device);
    });
    name = mla ? "mla" : "standard";
  }
  const auto names = AttentionRegistry::instance().names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    throw Error(ErrorCode::not_found,
                "unknown attention backend '" + name + "' (available: auto, " + joined(names) + ")");
  }
  return name;
}

}  // namespace latte
