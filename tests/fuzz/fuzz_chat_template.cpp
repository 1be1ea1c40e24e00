// libFuzzer harness: ChatTemplate::detect on arbitrary template sources and ChatTemplate::apply on
// arbitrary conversations (roles outside system/user/assistant included: they must give
// latte::Error). The input is cut at 0xFF bytes (0xFF never occurs in UTF-8): the first piece is a
// template source, the second picks a named format, then pieces alternate role, content.
#include <latte/chat.hpp>
#include <latte/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::vector<std::string_view> split(std::string_view input) {
  std::vector<std::string_view> pieces;
  size_t start = 0;
  for (size_t i = 0; i <= input.size(); ++i) {
    if (i == input.size() || input[i] == '\xff') {
      pieces.push_back(input.substr(start, i - start));
      start = i + 1;
    }
  }
  return pieces;
}

void render(const latte::ChatTemplate& tmpl, std::span<const latte::ChatMessage> messages) {
  for (bool generation_prompt : {false, true}) {
    try {
      const std::string text = tmpl.apply(messages, generation_prompt);
      if (tmpl.renders_bos() && text.rfind(tmpl.bos_text(), 0) != 0) __builtin_trap();
    } catch (const latte::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string_view> pieces = split(std::string_view(reinterpret_cast<const char*>(data), size));
  std::vector<latte::ChatMessage> messages;
  for (size_t i = 2; i + 1 < pieces.size(); i += 2) {
    std::string role(pieces[i]);
    // Short role pieces select a valid role so that most inputs render.
    static constexpr std::string_view kRoles[] = {"system", "user", "assistant", "tool"};
    if (role.size() == 1) role = kRoles[static_cast<uint8_t>(role[0]) & 3];
    messages.push_back({std::move(role), std::string(pieces[i + 1])});
  }
  try {
    render(latte::ChatTemplate::detect(pieces[0]), messages);
  } catch (const latte::Error&) {
  }
  const std::span<const std::string_view> names = latte::ChatTemplate::names();
  const std::string_view name = pieces.size() > 1 && pieces[1].size() == 1
                                    ? names[static_cast<uint8_t>(pieces[1][0]) % names.size()]
                                    : (pieces.size() > 1 ? pieces[1] : std::string_view("plain"));
  try {
    render(latte::ChatTemplate::named(name), messages);
  } catch (const latte::Error&) {
  }
  return 0;
}
