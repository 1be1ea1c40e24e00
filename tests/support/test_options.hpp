// Options shared by the whole test binary (set from main's command line).
#pragma once

#include <string>

namespace latte::test {

/// The attention backend model-level tests should use: from --attention=, else LATTE_ATTENTION,
/// else "mla".
const std::string& attention_backend();
void set_attention_backend(std::string name);

/// Directory with tests' data files, and the shared test data (../shared/testdata) when present.
std::string data_path(const std::string& relative);

}  // namespace latte::test
