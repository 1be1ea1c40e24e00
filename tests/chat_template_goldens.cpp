// Golden renders of each chat format. The expected strings were written out by hand from the real
// Jinja templates (tests/data/chat_templates/*.json) under Hugging Face's settings (trim_blocks,
// lstrip_blocks); tools/oracle/render_chat_templates.py renders the same conversations with Jinja2.
#include <doctest/doctest.h>

#include <latte/chat.hpp>
#include <latte/error.hpp>

#include <string>
#include <vector>

using latte::ChatMessage;
using latte::ChatTemplate;

namespace {

const std::vector<ChatMessage> kSystemUser{{"system", "You are a helpful assistant."}, {"user", "Hello!"}};
const std::vector<ChatMessage> kMultiTurn{
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello! How can I help?"}, {"user", "What is 2+2?"}};
const std::vector<ChatMessage> kTwoSystems{{"system", "Rule one."}, {"user", "Go."}, {"system", "Rule two."}};
const std::vector<ChatMessage> kReasoningHistory{
    {"user", "What is 3*7?"}, {"assistant", "<think>\n3 times 7 is 21.\n</think>\n\n21"}, {"user", "And 3*8?"}};
const std::vector<ChatMessage> kEndsWithReasoning{{"user", "Capital of France?"},
                                                  {"assistant", "<think>Easy one.</think>\nParis."}};
const std::vector<ChatMessage> kWhitespace{
    {"system", "  Padded system.  "}, {"user", " hi \n"}, {"assistant", "\n  spaced reply \n"}};
const std::vector<ChatMessage> kUnicode{{"user", "你好, ¿qué tal? 🙂"}, {"assistant", "\u3000全角 reply\u00a0"}};

std::string render(const char* name, const std::vector<ChatMessage>& messages, bool generation_prompt) {
  return ChatTemplate::named(name).apply(messages, generation_prompt);
}

}  // namespace

TEST_CASE("deepseek-v3 renders BOS, joined system texts, <｜User｜>/<｜Assistant｜> turns") {
  CHECK(render("deepseek-v3", kSystemUser, true) ==
        "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜>");
  CHECK(render("deepseek-v3", kMultiTurn, true) ==
        "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello! How can I help?<｜end▁of▁sentence｜>"
        "<｜User｜>What is 2+2?<｜Assistant｜>");
  CHECK(render("deepseek-v3", kMultiTurn, false) ==
        "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello! How can I help?<｜end▁of▁sentence｜>"
        "<｜User｜>What is 2+2?");
  CHECK(render("deepseek-v3", kTwoSystems, true) ==
        "<｜begin▁of▁sentence｜>Rule one.\n\nRule two.<｜User｜>Go.<｜Assistant｜>");
  CHECK(render("deepseek-v3", kReasoningHistory, false) ==
        "<｜begin▁of▁sentence｜><｜User｜>What is 3*7?<｜Assistant｜><think>\n3 times 7 is 21.\n</think>\n\n21"
        "<｜end▁of▁sentence｜><｜User｜>And 3*8?");
}

TEST_CASE("deepseek-r1 drops past reasoning and opens the answer with <think>") {
  CHECK(render("deepseek-r1", kSystemUser, true) ==
        "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hello!<｜Assistant｜><think>\n");
  CHECK(render("deepseek-r1", kMultiTurn, false) ==
        "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello! How can I help?<｜end▁of▁sentence｜>"
        "<｜User｜>What is 2+2?");
  CHECK(render("deepseek-r1", kReasoningHistory, true) ==
        "<｜begin▁of▁sentence｜><｜User｜>What is 3*7?<｜Assistant｜>\n\n21<｜end▁of▁sentence｜>"
        "<｜User｜>And 3*8?<｜Assistant｜><think>\n");
  CHECK(render("deepseek-r1", kEndsWithReasoning, false) ==
        "<｜begin▁of▁sentence｜><｜User｜>Capital of France?<｜Assistant｜>\nParis.<｜end▁of▁sentence｜>");
}

TEST_CASE("deepseek-v2 renders 'User: ...\\n\\nAssistant: ...' with system texts in place") {
  CHECK(render("deepseek-v2", kSystemUser, true) ==
        "<｜begin▁of▁sentence｜>You are a helpful assistant.\n\nUser: Hello!\n\nAssistant:");
  CHECK(render("deepseek-v2", kMultiTurn, true) ==
        "<｜begin▁of▁sentence｜>Be brief.\n\nUser: Hi\n\nAssistant: Hello! How can I help?<｜end▁of▁sentence｜>"
        "User: What is 2+2?\n\nAssistant:");
  CHECK(render("deepseek-v2", kMultiTurn, false) ==
        "<｜begin▁of▁sentence｜>Be brief.\n\nUser: Hi\n\nAssistant: Hello! How can I help?<｜end▁of▁sentence｜>"
        "User: What is 2+2?\n\n");
  CHECK(render("deepseek-v2", kTwoSystems, true) ==
        "<｜begin▁of▁sentence｜>Rule one.\n\nUser: Go.\n\nRule two.\n\nAssistant:");
}

TEST_CASE("glm (4.7 / 5) renders tags without newlines, </think> for turns without kept reasoning") {
  CHECK(render("glm", kSystemUser, true) ==
        "[gMASK]<sop><|system|>You are a helpful assistant.<|user|>Hello!<|assistant|><think>");
  CHECK(render("glm", kMultiTurn, true) ==
        "[gMASK]<sop><|system|>Be brief.<|user|>Hi<|assistant|></think>Hello! How can I help?<|user|>What is "
        "2+2?<|assistant|><think>");
  CHECK(render("glm", kMultiTurn, false) ==
        "[gMASK]<sop><|system|>Be brief.<|user|>Hi<|assistant|></think>Hello! How can I help?<|user|>What is 2+2?");
  CHECK(render("glm", kTwoSystems, false) == "[gMASK]<sop><|system|>Rule one.<|user|>Go.<|system|>Rule two.");
  CHECK(render("glm", kReasoningHistory, true) ==
        "[gMASK]<sop><|user|>What is 3*7?<|assistant|></think>21<|user|>And 3*8?<|assistant|><think>");
  CHECK(render("glm", kEndsWithReasoning, false) ==
        "[gMASK]<sop><|user|>Capital of France?<|assistant|><think>Easy one.</think>Paris.");
  CHECK(render("glm", kWhitespace, false) ==
        "[gMASK]<sop><|system|>  Padded system.  <|user|> hi \n<|assistant|></think>spaced reply");
  CHECK(render("glm", kUnicode, false) ==
        "[gMASK]<sop><|user|>你好, ¿qué tal? 🙂<|assistant|></think>全角 reply");
}

TEST_CASE("glm-4.5 puts a newline after each tag and writes empty <think></think> blocks") {
  CHECK(render("glm-4.5", kSystemUser, true) ==
        "[gMASK]<sop><|system|>\nYou are a helpful assistant.<|user|>\nHello!<|assistant|>");
  CHECK(render("glm-4.5", kMultiTurn, true) ==
        "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n<think></think>\nHello! How can I "
        "help?<|user|>\nWhat is 2+2?<|assistant|>");
  CHECK(render("glm-4.5", kReasoningHistory, false) ==
        "[gMASK]<sop><|user|>\nWhat is 3*7?<|assistant|>\n<think></think>\n21<|user|>\nAnd 3*8?");
  CHECK(render("glm-4.5", kEndsWithReasoning, true) ==
        "[gMASK]<sop><|user|>\nCapital of France?<|assistant|>\n<think>Easy one.</think>\nParis.<|assistant|>");
  CHECK(render("glm-4.5", kWhitespace, false) ==
        "[gMASK]<sop><|system|>\n  Padded system.  <|user|>\n hi \n<|assistant|>\n<think></think>\nspaced reply");
}

TEST_CASE("plain renders 'Role: text' turns separated by blank lines, without BOS") {
  CHECK(render("plain", kSystemUser, true) == "System: You are a helpful assistant.\n\nUser: Hello!\n\nAssistant:");
  CHECK(render("plain", kMultiTurn, false) ==
        "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello! How can I help?\n\nUser: What is 2+2?\n\n");
}

TEST_CASE("chat templates expose BOS, EOG token texts and stop strings") {
  const ChatTemplate r1 = ChatTemplate::named("deepseek-r1");
  CHECK(r1.renders_bos());
  CHECK(r1.bos_text() == "<｜begin▁of▁sentence｜>");
  CHECK(r1.apply(kSystemUser, true).starts_with(r1.bos_text()));
  REQUIRE(r1.eog_token_texts().size() == 1);
  CHECK(r1.eog_token_texts()[0] == "<｜end▁of▁sentence｜>");
  const ChatTemplate glm = ChatTemplate::named("glm-5");
  CHECK(glm.format() == latte::ChatFormat::glm);
  CHECK(glm.name() == "glm");
  CHECK(glm.bos_text() == "[gMASK]<sop>");
  CHECK(std::vector<std::string>(glm.eog_token_texts().begin(), glm.eog_token_texts().end()) ==
        std::vector<std::string>{"<|endoftext|>", "<|user|>", "<|observation|>"});
  const ChatTemplate v2 = ChatTemplate::named("deepseek-v2");
  CHECK(std::vector<std::string>(v2.stop_strings().begin(), v2.stop_strings().end()) ==
        std::vector<std::string>{"\n\nUser:", "\n\nAssistant:"});
  const ChatTemplate plain = ChatTemplate::named("plain");
  CHECK_FALSE(plain.renders_bos());
  CHECK(std::vector<std::string>(plain.stop_strings().begin(), plain.stop_strings().end()) ==
        std::vector<std::string>{"\n\nUser:", "\n\nSystem:", "\n\nAssistant:"});
  for (std::string_view name : ChatTemplate::names()) CHECK(ChatTemplate::named(name).name() == name);
}

TEST_CASE("an unknown role or template name is an invalid_argument error that names it") {
  const std::vector<ChatMessage> bad{{"user", "hi"}, {"tool", "{}"}};
  for (std::string_view name : ChatTemplate::names()) {
    try {
      (void)ChatTemplate::named(name).apply(bad, true);
      FAIL("expected an error for role 'tool'");
    } catch (const latte::Error& e) {
      CHECK(e.code() == latte::ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).find("#1 has unknown role 'tool'") != std::string::npos);
    }
  }
  try {
    (void)ChatTemplate::named("llama-3");
    FAIL("expected an error for an unknown name");
  } catch (const latte::Error& e) {
    CHECK(e.code() == latte::ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("'llama-3'") != std::string::npos);
  }
}
