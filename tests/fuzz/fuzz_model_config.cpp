// libFuzzer harness: a parsed GGUF file through ModelConfig::from_gguf, audit_weights and
// Model::from_file (the CPU load path up to the first forward pass). Only latte::Error may escape.
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    latte::gguf::File file =
        latte::gguf::File::from_bytes(std::as_bytes(std::span<const uint8_t>(data, size)), "fuzz.gguf");
    const latte::ModelConfig config = latte::ModelConfig::from_gguf(file);
    const latte::WeightAudit audit = latte::audit_weights(file, config);
    volatile size_t sink = audit.summary().size() + audit.problems().size();
    (void)sink;
    if (!audit.ok()) return 0;
    const latte::Model model = latte::Model::from_file(std::move(file));
    if (!(model.config() == config)) __builtin_trap();  // the loader reads the same config
  } catch (const latte::Error&) {
  }
  return 0;
}
