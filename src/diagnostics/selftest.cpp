// The GPU self-test entry points and the per-user cache of its verdicts.
//
// Cache: $XDG_CACHE_HOME/latte/selftest-<arch>-<driver>.json (or $HOME/.cache/latte/...), holding
// {"passed": bool, "table": "..."}; <arch> is the compute capability (e.g. sm90), <driver> the CUDA
// driver version (e.g. 12080). A new architecture or driver runs the test again. Within a process a
// device that passed is not checked again (Model::load calls ensure_selftest for every CUDA load).
#include "diagnostics/selftest_cases.hpp"

#include "core/environment.hpp"

#include <latte/diagnostics.hpp>
#include <latte/error.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include <unistd.h>  // getpid

namespace latte::diagnostics {

namespace {

std::filesystem::path cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "latte";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "latte";
  return {};
}

bool selftest_disabled() { return latte::detail::env_flag("LATTE_NO_SELFTEST", false); }

/// The kernels of the MISMATCH lines of a self-test table ("mla_decode bf16, rms_norm f32").
std::string failing_cases(const std::string& table) {
  std::istringstream lines(table);
  std::string line, names;
  while (std::getline(lines, line)) {
    if (line.find("MISMATCH") == std::string::npos) continue;
    // A case line starts with the kernel name, then at least two spaces before its shape.
    std::string name = line.substr(0, line.find("  "));
    if (!names.empty()) names += ", ";
    names += name;
  }
  return names.empty() ? std::string("unknown case") : names;
}

Error selftest_failure(const std::string& identity, const std::string& where, const std::string& table) {
  return Error(ErrorCode::device, "the GPU self-test failed on " + identity + " in " + failing_cases(table) + where +
                                      "; run `latte diagnose --selftest` for the table, or set LATTE_NO_SELFTEST=1 "
                                      "to skip the check at your own risk:\n" +
                                      table);
}

/// CUDA ordinals that passed in this process.
std::mutex verified_mutex;
std::set<int> verified_devices;

SelftestResult not_run(std::string reason) {
  SelftestResult r;
  r.reason = std::move(reason);
  return r;
}

}  // namespace

namespace {

SelftestResult run_plan(Device device, const detail::SelftestPlan& plan) {
  if (!device.is_cuda()) {
    return not_run("the self-test checks GPU kernels; give --device cuda:N");
  }
  if (!detail::selftest_built()) {
    return not_run("this build of latte has no CUDA backend (configure with -DLATTE_CUDA=ON)");
  }
  if (device.index < 0 || device.index >= Device::cuda_device_count()) {
    return not_run("no CUDA device " + device.to_string() + " (" + std::to_string(Device::cuda_device_count()) +
                   " visible)");
  }
  return detail::run_selftest_cases(device.index, plan);
}

}  // namespace

SelftestResult run_selftest(Device device) { return run_plan(device, detail::selftest_default_plan()); }

namespace {
/// The automatic check at the first CUDA load: every kernel family at the presets' shapes (all of them
/// have passed on real hardware, an H200, recorded in docs/diagnose.md; a self-test that was itself
/// wrong would refuse every CUDA load, so a family joins only after such a run).
detail::SelftestPlan first_load_plan() {
  detail::SelftestPlan plan = detail::selftest_default_plan();
  plan.label += ", first load";
  return plan;
}
}  // namespace

SelftestResult run_selftest(Device device, const Model& model) {
  return run_plan(device, detail::selftest_plan(detail::selftest_target(model)));
}

std::string selftest_case_list(const Model* model) {
  const detail::SelftestPlan plan =
      model ? detail::selftest_plan(detail::selftest_target(*model)) : detail::selftest_default_plan();
  std::string text = "self-test cases at the shapes of " + plan.label + ":\n";
  for (const detail::SelftestCase& c : plan.cases) {
    char line[256];
    std::snprintf(line, sizeof line, "%-18s %-34s %-36s bound %.0e\n",
                  std::string(detail::family_name(c.family)).c_str(), c.name.c_str(), c.shape.c_str(), c.bound);
    text += line;
  }
  for (const std::string& line : plan.not_covered) text += "not covered: " + line + "\n";
  return text;
}

void detail::forget_verified_devices() noexcept {
  const std::lock_guard lock(verified_mutex);
  verified_devices.clear();
}

void ensure_selftest(Device device) {
  if (!device.is_cuda() || selftest_disabled() || !detail::selftest_built()) return;
  const std::lock_guard lock(verified_mutex);
  if (verified_devices.contains(device.index)) return;
  if (device.index < 0 || device.index >= Device::cuda_device_count()) return;  // nothing to verify
  const std::string identity = detail::selftest_identity(device.index);         // "sm90-12080"
  const std::filesystem::path dir = cache_dir();
  const std::filesystem::path file = dir.empty() ? std::filesystem::path() : dir / ("selftest-" + identity + ".json");
  if (!file.empty()) {
    std::ifstream in(file);
    if (in) {
      try {
        const nlohmann::json cached = nlohmann::json::parse(in);
        if (cached.at("passed").get<bool>()) {
          verified_devices.insert(device.index);
          return;
        }
        throw selftest_failure(identity, " (a cached verdict: delete " + file.string() + " to re-run it)",
                               cached.value("table", std::string()));
      } catch (const nlohmann::json::exception&) {
        // An unreadable cache entry: run the test again and overwrite it.
      }
    }
  }
  const SelftestResult r = run_plan(device, first_load_plan());
  if (!r.ran) return;
  if (!file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    // Written to a private file, then renamed over the cache entry: a process reading the entry while
    // another writes it sees the old verdict or the new one, never half of one.
    const std::filesystem::path tmp = dir / (file.filename().string() + ".tmp-" + std::to_string(::getpid()));
    bool written = false;
    {
      std::ofstream out(tmp, std::ios::trunc);
      if (out) out << nlohmann::json{{"passed", r.passed}, {"table", r.table}}.dump(1) << '\n';
      out.close();
      written = static_cast<bool>(out);
    }
    if (written) std::filesystem::rename(tmp, file, ec);
    if (!written || ec) std::filesystem::remove(tmp, ec);
  }
  if (!r.passed) throw selftest_failure(identity, "", r.table);
  verified_devices.insert(device.index);
}

}  // namespace latte::diagnostics
