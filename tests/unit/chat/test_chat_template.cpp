// Chat formats: rendering of each format against hand-written text and against the models' own
// Jinja templates (tests/fixtures/chat_templates.json, rendered by jinja2 through
// tools/llamacpp/gen_chat_fixtures.py), recognition from Jinja sources, the default system
// prompt, and names.

#include <QtTest>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/chat_template.h"

using shoal::model::ChatFormat;
using shoal::model::ChatMessage;
using shoal::model::ChatTemplate;

namespace {

// The conversation every format is rendered with: system, user, assistant, user.
std::vector<ChatMessage> sampleConversation() {
  return {{"system", "You are terse."},
          {"user", "Hi"},
          {"assistant", "Hello!"},
          {"user", "Name a color."}};
}

QString q(const std::string& s) { return QString::fromStdString(s); }

// Jinja sources in the form models ship them (Hugging Face tokenizer_config.json), shortened to
// the parts that matter. Raw strings: "\n" here is the two-character escape of the Jinja source.
const char* const kQwen2Template =
    R"JINJA({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})JINJA";

const char* const kPlainChatMlTemplate =
    R"JINJA({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})JINJA";

const char* const kLlama3Template =
    R"JINJA({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})JINJA";

const char* const kLlama2Template =
    R"JINJA({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})JINJA";

const char* const kMistralTemplate =
    R"JINJA({%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- bos_token }}{%- for message in loop_messages %}{%- if message['role'] == 'user' %}{%- if loop.last and system_message is defined %}{{- '[INST] ' + system_message + '\n\n' + message['content'] + '[/INST]' }}{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content']|trim + eos_token}}{%- endif %}{%- endfor %})JINJA";

const char* const kGemmaTemplate =
    R"JINJA({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})JINJA";

const char* const kVicunaTemplate =
    R"JINJA({% for message in messages %}{% if message['role'] == 'user' %}{{ 'USER: ' + message['content'] + '\n' }}{% elif message['role'] == 'assistant' %}{{ 'ASSISTANT: ' + message['content'] + eos_token + '\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %})JINJA";

std::filesystem::path defaultModelPath() {
  const char* env = std::getenv("SHOAL_MODELS_DIR");
  const std::filesystem::path dir = env != nullptr && *env != '\0' ? env : SHOAL_MODELS_DIR;
  return dir / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace

class TestChatTemplate : public QObject {
  Q_OBJECT

 private slots:
  void chatMlRendersEveryTurnWithImStartImEnd() {
    const std::string expected =
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nName a color.<|im_end|>\n"
        "<|im_start|>assistant\n";
    QCOMPARE(q(renderChat(ChatFormat::ChatML, sampleConversation(), true)), q(expected));
  }

  void llama3RendersHeadersAndEotIds() {
    const std::string expected =
        "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nName a color.<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n";
    QCOMPARE(q(renderChat(ChatFormat::Llama3, sampleConversation(), true)), q(expected));
  }

  void llama2PutsSysBlockInFirstInstAndBosBeforeLaterTurns() {
    const std::string expected =
        "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
        "<s>[INST] Name a color. [/INST]";
    QCOMPARE(q(renderChat(ChatFormat::Llama2, sampleConversation(), true)), q(expected));
  }

  void mistralPutsSystemPromptInLastUserTurn() {
    const std::string expected =
        "[INST] Hi[/INST] Hello!</s>"
        "[INST] You are terse.\n\nName a color.[/INST]";
    QCOMPARE(q(renderChat(ChatFormat::Mistral, sampleConversation(), true)), q(expected));
  }

  void gemmaFoldsSystemIntoFirstUserTurnAndCallsAssistantModel() {
    const std::string expected =
        "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nName a color.<end_of_turn>\n"
        "<start_of_turn>model\n";
    QCOMPARE(q(renderChat(ChatFormat::Gemma, sampleConversation(), true)), q(expected));
  }

  void withoutAssistantPrefixTextEndsAfterLastTurn() {
    const std::vector<ChatMessage> messages = {{"user", "Hi"}};
    QCOMPARE(q(renderChat(ChatFormat::ChatML, messages, false)),
             q("<|im_start|>user\nHi<|im_end|>\n"));
    QCOMPARE(q(renderChat(ChatFormat::Llama3, messages, false)),
             q("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"));
    QCOMPARE(q(renderChat(ChatFormat::Gemma, messages, false)),
             q("<start_of_turn>user\nHi<end_of_turn>\n"));
  }

  void trimmingFormatsStripContentButChatMlKeepsIt() {
    const std::vector<ChatMessage> messages = {{"user", "  Hi \n"}};
    QCOMPARE(q(renderChat(ChatFormat::ChatML, messages, false)),
             q("<|im_start|>user\n  Hi \n<|im_end|>\n"));
    QCOMPARE(q(renderChat(ChatFormat::Llama3, messages, false)),
             q("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"));
    QCOMPARE(q(renderChat(ChatFormat::Llama2, messages, false)), q("[INST] Hi [/INST]"));
  }

  void formatsWithoutOtherRolesRefuseThem() {
    const std::vector<ChatMessage> messages = {{"user", "Hi"}, {"tool", "42"}};
    QVERIFY_THROWS_EXCEPTION(shoal::Error, renderChat(ChatFormat::Llama2, messages, true));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, renderChat(ChatFormat::Mistral, messages, true));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, renderChat(ChatFormat::Gemma, messages, true));
    // ChatML writes a tool's result as Qwen2.5's template does (a user turn of responses).
    QCOMPARE(q(renderChat(ChatFormat::ChatML, messages, false)),
             q("<|im_start|>user\nHi<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n"
               "</tool_response><|im_end|>\n"));
  }

  void formatsWithoutToolCallsRefuseToolsAndCalls() {
    ChatTemplate gemma;
    gemma.format = ChatFormat::Gemma;
    gemma.tools = {R"({"type": "function", "function": {"name": "f"}})"};
    const std::vector<ChatMessage> ask = {{"user", "Hi"}};
    QVERIFY_THROWS_EXCEPTION(shoal::Error, renderChat(gemma, ask, true));
    ChatMessage called{"assistant", ""};
    called.toolCalls.push_back({"f", "{}"});
    const std::vector<ChatMessage> withCall = {{"user", "Hi"}, called, {"user", "Go on"}};
    for (ChatFormat f : {ChatFormat::Llama3, ChatFormat::Phi3, ChatFormat::MistralV7}) {
      QVERIFY_THROWS_EXCEPTION(shoal::Error, renderChat(f, withCall, true));
      ChatTemplate t;
      t.format = f;
      t.tools = gemma.tools;
      QVERIFY_THROWS_EXCEPTION(shoal::Error, renderChat(t, ask, true));
      QVERIFY(!shoal::model::chatFormatHasToolCalls(f));
    }
    QVERIFY(shoal::model::chatFormatHasToolCalls(ChatFormat::ChatML));
    QVERIFY(shoal::model::chatFormatHasToolCalls(ChatFormat::Qwen3));
    QVERIFY(shoal::model::chatFormatHasToolCalls(ChatFormat::Llama31));
    QCOMPARE(shoal::model::toolCallSyntaxOf(ChatFormat::Harmony),
             shoal::model::ToolCallSyntax::HarmonyRecipient);
    QCOMPARE(shoal::model::toolCallSyntaxOf(ChatFormat::Llama31),
             shoal::model::ToolCallSyntax::JsonReply);
  }

  void harmonyTakesOneCallPerMessageAndAResultNeedsACall() {
    ChatMessage calls{"assistant", ""};
    calls.toolCalls = {{"f", "{}"}, {"g", "{}"}};
    QVERIFY_THROWS_EXCEPTION(
        shoal::Error,
        renderChat(ChatFormat::Harmony, {{"user", "Hi"}, calls, {"user", "x"}}, true));
    QVERIFY_THROWS_EXCEPTION(
        shoal::Error, renderChat(ChatFormat::Harmony, {{"user", "Hi"}, {"tool", "5"}}, true));
    ChatTemplate t;
    t.format = ChatFormat::Harmony;
    t.tools = {"[1, 2]"};  // not a function tool
    QVERIFY_THROWS_EXCEPTION(shoal::Error, renderChat(t, {{"user", "Hi"}}, true));
  }

  void llama31TakesOneCallPerMessageAndToolsNeedAUserTurn() {
    ChatMessage calls{"assistant", ""};
    calls.toolCalls = {{"f", "{}"}, {"g", "{}"}};
    QVERIFY_THROWS_EXCEPTION(
        shoal::Error,
        renderChat(ChatFormat::Llama31, {{"user", "Hi"}, calls, {"user", "x"}}, true));
    ChatTemplate t;
    t.format = ChatFormat::Llama31;
    t.tools = {"{}"};
    QVERIFY_THROWS_EXCEPTION(shoal::Error, renderChat(t, {{"system", "Be brief."}}, true));
    // Detected from the template's knowledge header, with the date it fixes (3.1, 3.3).
    const ChatTemplate detected = shoal::model::detectChatTemplate(
        "{{- \"Cutting Knowledge Date: December 2023\\n\" }}{%- set date_string = \"26 Jul 2024\" "
        "%}<|start_header_id|>system<|end_header_id|>");
    QCOMPARE(detected.format, ChatFormat::Llama31);
    QCOMPARE(QString::fromStdString(detected.fixedDate), QString("26 Jul 2024"));
  }

  void detectsChatMlFromQwenTemplate() {
    QCOMPARE(shoal::model::detectChatFormat(kQwen2Template), ChatFormat::ChatML);
    QCOMPARE(shoal::model::detectChatFormat(kPlainChatMlTemplate), ChatFormat::ChatML);
  }

  // Qwen3's template (the part that matters here, as Qwen/Qwen3-8B ships it): ChatML whose
  // assistant turns split off "</think>"; detected as qwen3, and earlier replies are written
  // without their reasoning.
  void detectsQwen3AndDropsReasoningFromTheHistory() {
    const char* qwen3 =
        "{%- for message in messages %}{%- if message.role == \"assistant\" %}"
        "{%- if '</think>' in content %}{%- set reasoning_content = content.split('</think>')[0]"
        ".rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}{%- endif %}"
        "{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
        "{%- if enable_thinking is defined and enable_thinking is false %}"
        "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";
    QCOMPARE(shoal::model::detectChatFormat(qwen3), ChatFormat::Qwen3);
    const std::vector<shoal::model::ChatMessage> messages = {
        {"user", "2+2?"},
        {"assistant", "<think>\nSimple sum.\n</think>\n\n4"},
        {"user", "And 3+3? /no_think"}};
    QCOMPARE(q(renderChat(ChatFormat::Qwen3, messages, true)),
             q("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
               "<|im_start|>user\nAnd 3+3? /no_think<|im_end|>\n<|im_start|>assistant\n"));
    QCOMPARE(shoal::model::chatStopStrings(ChatFormat::Qwen3).front(), std::string("<|im_end|>"));
    // enable_thinking=false: an empty block after the assistant prefix; other formats ignore it.
    shoal::model::ChatTemplate noThink;
    noThink.format = ChatFormat::Qwen3;
    noThink.thinking = false;
    QVERIFY(q(renderChat(noThink, messages, true))
                .endsWith(q("<|im_start|>assistant\n<think>\n\n</think>\n\n")));
    noThink.format = ChatFormat::ChatML;
    QVERIFY(q(renderChat(noThink, messages, true)).endsWith(q("<|im_start|>assistant\n")));
  }

  // Mistral Small 3.x (v7-tekken): system and user turns in their own brackets, no spaces.
  void detectsAndRendersMistralV7() {
    const char* v7 =
        "{%- if messages[0]['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + messages[0]['content'] "
        "+ '[/SYSTEM_PROMPT]' }}{%- endif %}{%- for message in loop_messages %}"
        "{%- if message['role'] == 'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}"
        "{%- elif message['role'] == 'assistant' %}{{- message['content'] + eos_token }}"
        "{%- endif %}{%- endfor %}";
    QCOMPARE(shoal::model::detectChatFormat(v7), ChatFormat::MistralV7);
    const std::vector<shoal::model::ChatMessage> messages = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
    QCOMPARE(
        q(renderChat(ChatFormat::MistralV7, messages, true)),
        q("[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST]Hello.</s>[INST]Bye[/INST]"));
    QCOMPARE(shoal::model::chatStopStrings(ChatFormat::MistralV7).front(), std::string("</s>"));
  }

  // Each family's real template (as the model ships it): Shoal recognises the format from its
  // source and renders what the template renders, character for character.
  void rendersWhatTheModelsOwnTemplatesRender_data() {
    QTest::addColumn<int>("index");
    std::ifstream in(std::string(SHOAL_FIXTURES_DIR) + "/chat_templates.json");
    const nlohmann::json doc = nlohmann::json::parse(in);
    for (size_t i = 0; i < doc["cases"].size(); ++i) {
      const auto& c = doc["cases"][i];
      const std::string tag = c["format"].get<std::string>() + "/" +
                              c["conversation"].get<std::string>() + " (" +
                              c["template"].get<std::string>() + ")";
      QTest::newRow(tag.c_str()) << static_cast<int>(i);
    }
  }

  void rendersWhatTheModelsOwnTemplatesRender() {
    QFETCH(int, index);
    std::ifstream in(std::string(SHOAL_FIXTURES_DIR) + "/chat_templates.json");
    const nlohmann::json doc = nlohmann::json::parse(in);
    const auto& c = doc["cases"][static_cast<size_t>(index)];
    const std::string source = doc["templates"][c["template"].get<std::string>()];
    ChatTemplate tmpl = shoal::model::detectChatTemplate(source);
    QCOMPARE(q(std::string(shoal::model::chatFormatName(tmpl.format))),
             q(c["format"].get<std::string>()));
    tmpl.currentDate = doc["meta"]["date"].get<std::string>();
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) {
      ChatMessage message{m["role"].get<std::string>(), m["content"].get<std::string>()};
      for (const auto& call : m.value("tool_calls", nlohmann::json::array())) {
        message.toolCalls.push_back({call["function"]["name"].get<std::string>(),
                                     call["function"]["arguments_text"].get<std::string>()});
      }
      messages.push_back(std::move(message));
    }
    for (const auto& tool : c.value("tools_text", nlohmann::json::array())) {
      tmpl.tools.push_back(tool.get<std::string>());
    }
    QCOMPARE(q(renderChat(tmpl, messages, c["add_generation_prompt"].get<bool>())),
             q(c["text"].get<std::string>()));
  }

  void detectsAndRendersPhi3() {
    const char* phi3 =
        "{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' "
        "%}"
        "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";
    QCOMPARE(shoal::model::detectChatFormat(phi3), ChatFormat::Phi3);
    const std::vector<shoal::model::ChatMessage> messages = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
    QCOMPARE(q(renderChat(ChatFormat::Phi3, messages, true)),
             q("<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n"
               "<|user|>\nBye<|end|>\n<|assistant|>\n"));
    QCOMPARE(shoal::model::chatStopStrings(ChatFormat::Phi3).front(), std::string("<|end|>"));
  }

  void detectsLlama3FromHeaderTokens() {
    QCOMPARE(shoal::model::detectChatFormat(kLlama3Template), ChatFormat::Llama3);
  }

  void detectsLlama2FromInstWithSysBlock() {
    QCOMPARE(shoal::model::detectChatFormat(kLlama2Template), ChatFormat::Llama2);
  }

  void detectsMistralFromInstWithoutSysBlock() {
    QCOMPARE(shoal::model::detectChatFormat(kMistralTemplate), ChatFormat::Mistral);
  }

  void detectsGemmaFromStartOfTurn() {
    QCOMPARE(shoal::model::detectChatFormat(kGemmaTemplate), ChatFormat::Gemma);
  }

  void emptyOrUnknownTemplateFallsBackToChatMl() {
    const ChatTemplate empty = shoal::model::detectChatTemplate("");
    QCOMPARE(empty.format, ChatFormat::ChatML);
    QVERIFY(empty.defaultSystemPrompt.empty());
    QCOMPARE(shoal::model::detectChatFormat(kVicunaTemplate), ChatFormat::ChatML);
  }

  void extractsLiteralDefaultSystemPrompt() {
    QCOMPARE(q(shoal::model::detectChatTemplate(kQwen2Template).defaultSystemPrompt),
             q("You are a helpful assistant."));
    const std::string llama3WithDefault =
        std::string(
            R"JINJA({% if messages[0]['role'] != 'system' %}{{ '<|start_header_id|>system<|end_header_id|>\n\nYou are a pirate.<|eot_id|>' }}{% endif %})JINJA") +
        kLlama3Template;
    const ChatTemplate t = shoal::model::detectChatTemplate(llama3WithDefault);
    QCOMPARE(t.format, ChatFormat::Llama3);
    QCOMPARE(q(t.defaultSystemPrompt), q("You are a pirate."));
  }

  void systemTurnBuiltFromMessageIsNoDefault() {
    QVERIFY(shoal::model::detectChatTemplate(kPlainChatMlTemplate).defaultSystemPrompt.empty());
    const char* const fromMessage =
        R"JINJA({{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }})JINJA";
    QVERIFY(shoal::model::detectChatTemplate(fromMessage).defaultSystemPrompt.empty());
    QVERIFY(shoal::model::detectChatTemplate(kLlama3Template).defaultSystemPrompt.empty());
  }

  void defaultSystemPromptDecodesJinjaEscapes() {
    const char* const escaped =
        R"JINJA({{ '<|im_start|>system\nYou\'re kind.\nBe brief.<|im_end|>\n' }})JINJA";
    QCOMPARE(q(shoal::model::detectChatTemplate(escaped).defaultSystemPrompt),
             q("You're kind.\nBe brief."));
  }

  void defaultSystemPromptIsInjectedOnlyWithoutSystemMessage() {
    ChatTemplate t;
    t.format = ChatFormat::ChatML;
    t.defaultSystemPrompt = "Be nice.";
    QCOMPARE(q(renderChat(t, {{"user", "Hi"}}, true)),
             q("<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
               "<|im_start|>assistant\n"));
    QCOMPARE(q(renderChat(t, {{"system", "Be rude."}, {"user", "Hi"}}, false)),
             q("<|im_start|>system\nBe rude.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"));
  }

  void smolLm2TemplateIsChatMlWithItsDefaultSystemPrompt() {
    const std::filesystem::path path = defaultModelPath();
    if (!std::filesystem::exists(path)) {
      QSKIP(qPrintable("default model not present: " + QString::fromStdString(path.string())));
    }
    const shoal::gguf::File file = shoal::gguf::File::open(path);
    const ChatTemplate t =
        shoal::model::detectChatTemplate(file.getString("tokenizer.chat_template"));
    QCOMPARE(t.format, ChatFormat::ChatML);
    QCOMPARE(q(t.defaultSystemPrompt),
             q("You are a helpful AI assistant named SmolLM, trained by Hugging Face"));
    // What the template itself writes for a lone user message with add_generation_prompt.
    QCOMPARE(q(renderChat(t, {{"user", "Hi"}}, true)),
             q("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
               "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
  }

  void namesRoundTrip() {
    for (std::string_view name : shoal::model::chatFormatNames()) {
      const auto format = shoal::model::chatFormatFromName(name);
      QVERIFY(format.has_value());
      QCOMPARE(shoal::model::chatFormatName(*format), name);
    }
    QCOMPARE(shoal::model::chatFormatFromName("ChatML"), std::optional(ChatFormat::ChatML));
    QCOMPARE(shoal::model::chatFormatNames().size(), size_t{10});
  }

  void unknownNamesAreRefused() {
    QVERIFY(!shoal::model::chatFormatFromName("vicuna").has_value());
    QVERIFY(!shoal::model::chatFormatFromName("").has_value());
    QVERIFY(!shoal::model::chatFormatFromName("chatml ").has_value());
  }

  void stopStringsEndTheAssistantTurn() {
    QCOMPARE(shoal::model::chatStopStrings(ChatFormat::ChatML).front(), std::string("<|im_end|>"));
    QCOMPARE(shoal::model::chatStopStrings(ChatFormat::Llama3).front(), std::string("<|eot_id|>"));
    QCOMPARE(shoal::model::chatStopStrings(ChatFormat::Gemma).front(),
             std::string("<end_of_turn>"));
    QCOMPARE(shoal::model::chatStopStrings(ChatFormat::Llama2).front(), std::string("</s>"));
    QCOMPARE(shoal::model::chatStopStrings(ChatFormat::Mistral).front(), std::string("</s>"));
  }
};

QTEST_APPLESS_MAIN(TestChatTemplate)
#include "test_chat_template.moc"
