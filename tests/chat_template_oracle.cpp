// ChatTemplate against the real templates in tests/data/chat_templates/: detect() recognises each
// one, and apply() reproduces the Jinja2 renders that tools/oracle/render_chat_templates.py wrote
// to oracle_renders.json for every conversation, with and without the generation prompt.
#include <doctest/doctest.h>

#include "support/test_options.hpp"

#include <latte/chat.hpp>
#include <latte/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using latte::ChatMessage;
using latte::ChatTemplate;

namespace {

nlohmann::json read_json(const std::string& relative) {
  const std::string path = latte::test::data_path(relative);
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return nlohmann::json::parse(in);
}

std::vector<std::string> template_files() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(latte::test::data_path("chat_templates"))) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".json" && name != "conversations.json" && name != "oracle_renders.json") {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// `text` in double quotes, as the error messages quote templates.
std::string in_quotes(std::string_view text) {
  std::string out(1, '"');
  out.append(text);
  out.push_back('"');
  return out;
}

std::string unsupported_message(std::string_view source) {
  try {
    (void)ChatTemplate::detect(source);
  } catch (const latte::Error& e) {
    CHECK(e.code() == latte::ErrorCode::unsupported);
    return e.what();
  }
  FAIL("detect() accepted a template it should reject");
  return {};
}

}  // namespace

TEST_CASE("detect() recognises every committed real chat template") {
  const std::vector<std::string> files = template_files();
  REQUIRE(files.size() >= 6);
  for (const std::string& file : files) {
    const nlohmann::json spec = read_json("chat_templates/" + file);
    CAPTURE(file);
    CHECK(ChatTemplate::detect(spec.at("chat_template").get<std::string>()).name() ==
          spec.at("latte_format").get<std::string>());
  }
}

TEST_CASE("apply() equals the Jinja2 render of the real template for every oracle conversation") {
  const nlohmann::json oracle = read_json("chat_templates/oracle_renders.json");
  const nlohmann::json conversations = read_json("chat_templates/conversations.json").at("conversations");
  size_t compared = 0;
  for (const auto& item : oracle.at("templates").items()) {
    const std::string file = item.key();
    const nlohmann::json& entry = item.value();
    const ChatTemplate tmpl = ChatTemplate::named(entry.at("latte_format").get<std::string>());
    for (const nlohmann::json& conversation : conversations) {
      std::vector<ChatMessage> messages;
      for (const nlohmann::json& m : conversation.at("messages")) {
        messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
      }
      const std::string id = conversation.at("id").get<std::string>();
      const nlohmann::json& renders = entry.at("renders").at(id);
      CAPTURE(file);
      CAPTURE(id);
      CHECK(tmpl.apply(messages, true) == renders.at("generation_prompt").get<std::string>());
      CHECK(tmpl.apply(messages, false) == renders.at("no_generation_prompt").get<std::string>());
      compared += 2;
    }
  }
  CHECK(compared >= 80);
}

TEST_CASE("plain_jinja() is the committed latte-plain template and detects as plain") {
  const nlohmann::json spec = read_json("chat_templates/latte-plain.json");
  CHECK(ChatTemplate::plain_jinja() == spec.at("chat_template").get<std::string>());
  CHECK(ChatTemplate::detect(ChatTemplate::plain_jinja()).format() == latte::ChatFormat::plain);
}

TEST_CASE("detect() rejects other templates with unsupported, quoting their first 80 characters") {
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const std::string message = unsupported_message(chatml);
  CHECK(message.find(in_quotes(std::string_view(chatml).substr(0, 80))) != std::string::npos);
  // A DeepSeek hybrid-thinking template (V3.1 style) has a different layout and is refused.
  CHECK(unsupported_message("{%- if not thinking is defined -%}{{'<｜User｜>' + m}}{{'<｜Assistant｜></think>'}}")
            .find("hybrid-thinking") != std::string::npos);
  // The GLM-4-9B-chat template (roles spelled by a variable, no think blocks) is not GLM-4.5+.
  (void)unsupported_message(
      "[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|>{{ item['metadata'] }}\n{{ item['content'] "
      "}}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}");
  // Newlines are shown escaped and a multi-byte character is never cut.
  const std::string long_unicode = std::string(79, 'x') + "é\nmore";
  CHECK(unsupported_message(long_unicode).find(in_quotes(std::string(79, 'x') + "é")) != std::string::npos);
  CHECK(unsupported_message("line one\nline two").find("\"line one\\nline two\"") != std::string::npos);
}
