// kuiper_server's parts that do not need a running engine: request parsing and checking,
// prompt layout, response objects, SSE framing, metrics text, the engine-to-handler hand-over.
// The server as a whole is tested end to end with the openai client (server_openai_test.py).
#include <chrono>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "kuiper/generation/chat_template_choice.h"
#include "openai_request.h"
#include "openai_response.h"
#include "prometheus_metrics.h"
#include "prompt_tokens.h"
#include "request_stream.h"
#include "test/test_util.h"

namespace kuiper::server {
namespace {

using nlohmann::json;

GenerationRequest parse_ok(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  auto parsed = parse_generation_request(body, endpoint);
  if (auto* error = std::get_if<ApiError>(&parsed)) ADD_FAILURE() << body << " -> " << error->message;
  return std::holds_alternative<GenerationRequest>(parsed) ? std::get<GenerationRequest>(parsed) : GenerationRequest{};
}

ApiError parse_error(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  auto parsed = parse_generation_request(body, endpoint);
  if (!std::holds_alternative<ApiError>(parsed)) {
    ADD_FAILURE() << body << " was accepted";
    return {};
  }
  return std::get<ApiError>(parsed);
}

TEST(ServerRequest, CompletionFields) {
  GenerationRequest r = parse_ok(R"({"model": "m", "prompt": "Once", "max_tokens": 7, "temperature": 0,
      "top_p": 0.5, "top_k": 3, "min_p": 0.1, "seed": 42, "stop": "\n", "presence_penalty": 0.5,
      "frequency_penalty": -0.5, "repetition_penalty": 1.1, "stream": true,
      "stream_options": {"include_usage": true}, "user": "ignored", "n": 1, "echo": false})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(*r.seed, 42u);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"\n"});
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(ServerRequest, NullMeansDefault) {
  GenerationRequest r = parse_ok(R"({"model": "m", "prompt": "x", "temperature": null, "stop": null,
                                     "max_tokens": null, "seed": null})");
  EXPECT_EQ(r.sampling.temperature, SamplingParams{}.temperature);
  EXPECT_TRUE(r.sampling.stop.empty());
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.seed.has_value());
}

TEST(ServerRequest, PromptForms) {
  EXPECT_EQ(parse_ok(R"({"model": "m", "prompt": ["one"]})").prompt, "one");
  EXPECT_EQ(*parse_ok(R"({"model": "m", "prompt": [1, 2, 3]})").prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*parse_ok(R"({"model": "m", "prompt": [[4, 5]]})").prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(parse_error(R"({"model": "m", "prompt": ["a", "b"]})").param, "prompt");
  EXPECT_EQ(parse_error(R"({"model": "m", "prompt": [1, -2]})").param, "prompt");
  EXPECT_EQ(parse_error(R"({"model": "m", "prompt": 5})").param, "prompt");
  EXPECT_EQ(parse_error(R"({"model": "m"})").param, "prompt");
}

TEST(ServerRequest, StopForms) {
  EXPECT_EQ(parse_ok(R"({"model": "m", "prompt": "x", "stop": ["a", "bc"]})").sampling.stop,
            (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(parse_error(R"({"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]})").param, "stop");
  EXPECT_EQ(parse_error(R"({"model": "m", "prompt": "x", "stop": [1]})").param, "stop");
  EXPECT_EQ(parse_error(R"({"model": "m", "prompt": "x", "stop": [""]})").param, "stop");
}

TEST(ServerRequest, MaxCompletionTokensWins) {
  EXPECT_EQ(*parse_ok(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                         "max_completion_tokens": 9})",
                      Endpoint::kChatCompletions)
                 .max_tokens,
            9);
}

TEST(ServerRequest, ChatMessages) {
  GenerationRequest r = parse_ok(R"({"model": "m", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
      {"role": "assistant", "content": "Hi", "name": "bot"},
      {"role": "user", "content": "Again"}]})",
                                 Endpoint::kChatCompletions);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hello");
  EXPECT_EQ(r.messages[3].content, "Again");
}

TEST(ServerRequest, BadRequestsNameTheirField) {
  struct Case {
    std::string body;
    std::string param;
  };
  const Case cases[] = {
      {R"({"model": "m", "prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"model": "m", "prompt": "x", "temperature": 2.5})", "temperature"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 100000000000000000000})", "max_tokens"},  // beyond uint64
      {R"({"model": "m", "prompt": "x", "top_p": 0})", "top_p"},
      {R"({"model": "m", "prompt": "x", "top_k": -1})", "top_k"},
      {R"({"model": "m", "prompt": "x", "top_k": 1.5})", "top_k"},
      {R"({"model": "m", "prompt": "x", "max_tokens": -5})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "max_tokens": "10"})", "max_tokens"},
      {R"({"model": "m", "prompt": "x", "seed": 1.5})", "seed"},
      {R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream"},
      {R"({"model": "m", "prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"model": "m", "prompt": "x", "n": 2})", "n"},
      {R"({"model": "m", "prompt": "x", "logprobs": 3})", "logprobs"},
      {R"({"model": "m", "prompt": "x", "echo": true})", "echo"},
      {R"({"model": "m", "prompt": "x", "best_of": 3})", "best_of"},
      {R"({"model": "m", "prompt": "x", "logit_bias": {"5": 10}})", "logit_bias"},
      {R"({"model": 7, "prompt": "x"})", "model"},
      {R"({"prompt": "x"})", "model"},
      {R"({"model": "m", "prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"model": "m", "prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
  };
  for (const Case& c : cases) {
    const ApiError error = parse_error(c.body);
    EXPECT_EQ(error.http_status, 400) << c.body;
    EXPECT_EQ(error.type, "invalid_request_error") << c.body;
    EXPECT_EQ(error.param, c.param) << c.body << " -> " << error.message;
  }
}

TEST(ServerRequest, BadChatRequests) {
  for (const char* body : {
           R"({"model": "m", "messages": []})",
           R"({"model": "m", "messages": "hi"})",
           R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})",
           R"({"model": "m", "messages": [{"role": "user", "content": null}]})",
           R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
           R"({"model": "m", "messages": [{"content": "x"}]})",
       }) {
    EXPECT_EQ(parse_error(body, Endpoint::kChatCompletions).param, "messages") << body;
  }
  EXPECT_EQ(parse_error(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true})",
                        Endpoint::kChatCompletions)
                .param,
            "logprobs");
  EXPECT_EQ(parse_error(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                           "tools": [{"type": "function"}]})",
                        Endpoint::kChatCompletions)
                .param,
            "tools");
}

TEST(ServerRequest, MalformedBodies) {
  for (const std::string& body : {std::string("{"), std::string("not json"), std::string("[1, 2]"),
                                 std::string("{\"model\": \"m\", \"prompt\": \"\xff\xfe\"}"), std::string(),
                                 std::string(R"({"model": "m", "prompt": "x", "temperature": 1e400})")}) {
    const ApiError error = parse_error(body);
    EXPECT_EQ(error.http_status, 400);
    EXPECT_FALSE(error.message.empty());
  }
}

TEST(ServerRequest, MaxTokensAgainstTheContext) {
  GenerationRequest completion = parse_ok(R"({"model": "m", "prompt": "x"})");
  EXPECT_EQ(std::get<int>(resolve_max_tokens(completion, 10, 512)), 16);  // OpenAI's default
  EXPECT_EQ(std::get<int>(resolve_max_tokens(completion, 500, 512)), 12);
  GenerationRequest chat =
      parse_ok(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", Endpoint::kChatCompletions);
  EXPECT_EQ(std::get<int>(resolve_max_tokens(chat, 10, 512)), 502);  // the rest of the context
  GenerationRequest huge = parse_ok(R"({"model": "m", "prompt": "x", "max_tokens": 9223372036854775807})");
  ApiError error = std::get<ApiError>(resolve_max_tokens(huge, 10, 512));
  EXPECT_EQ(error.param, "max_tokens");
  EXPECT_EQ(error.code, "context_length_exceeded");
  error = std::get<ApiError>(resolve_max_tokens(completion, 512, 512));
  EXPECT_EQ(error.param, "prompt");
  EXPECT_EQ(error.code, "context_length_exceeded");
  GenerationRequest exact = parse_ok(R"({"model": "m", "prompt": "x", "max_tokens": 502})");
  EXPECT_EQ(std::get<int>(resolve_max_tokens(exact, 10, 512)), 502);
}

class ServerPrompt : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer = load_tokenizer(test::source_path("models/stories260K/tok512.bin"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    tokenizer_ = std::move(tokenizer).value();
    auto chat_template = make_chat_template(ChatTemplateKind::kAuto, *tokenizer_);
    ASSERT_TRUE(chat_template.ok());
    template_ = std::move(chat_template).value();
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
};

TEST_F(ServerPrompt, CompletionIsEncodedWithBos) {
  auto ids = prompt_tokens(parse_ok(R"({"model": "m", "prompt": "Once upon a time"})"), *tokenizer_, *template_);
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids), *tokenizer_->encode("Once upon a time", {.add_bos = true}));
  ids = prompt_tokens(parse_ok(R"({"model": "m", "prompt": [1, 400]})"), *tokenizer_, *template_);
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids), (std::vector<int32_t>{1, 400}));
  ids = prompt_tokens(parse_ok(R"({"model": "m", "prompt": [1, 512]})"), *tokenizer_, *template_);
  EXPECT_EQ(std::get<ApiError>(ids).param, "prompt");
}

TEST_F(ServerPrompt, ChatLayoutFollowsTheTemplate) {
  auto ids = prompt_tokens(parse_ok(R"({"model": "m", "messages": [{"role": "system", "content": "S"},
      {"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}]})",
                                    Endpoint::kChatCompletions),
                           *tokenizer_, *template_);
  const std::vector<ChatExchange> history = {{"U1", "A1"}};
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids), *template_->encode_dialog("S", history, "U2"));
  ids = prompt_tokens(parse_ok(R"({"model": "m", "messages": [{"role": "user", "content": "U"}]})",
                               Endpoint::kChatCompletions),
                      *tokenizer_, *template_);
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids), *template_->encode_dialog("", {}, "U"));
}

TEST_F(ServerPrompt, ChatLayoutErrors) {
  for (const char* messages : {
           R"([{"role": "system", "content": "S"}])",
           R"([{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}])",
           R"([{"role": "user", "content": "U"}, {"role": "user", "content": "V"}, {"role": "user", "content": "W"}])",
           R"([{"role": "assistant", "content": "A"}])",
           R"([{"role": "user", "content": "U"}, {"role": "system", "content": "S"}, {"role": "user", "content": "V"}])",
       }) {
    auto ids = prompt_tokens(parse_ok(std::string(R"({"model": "m", "messages": )") + messages + "}",
                                      Endpoint::kChatCompletions),
                             *tokenizer_, *template_);
    ASSERT_TRUE(std::holds_alternative<ApiError>(ids)) << messages;
    EXPECT_EQ(std::get<ApiError>(ids).param, "messages");
  }
}

TEST(ServerResponse, CompletionObjects) {
  const ResponseHeader completion{Endpoint::kCompletions, "cmpl-1", 1700000000, "m"};
  const json whole = completion_object(completion, "text", FinishReason::kLength, {5, 2, 3});
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "text");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["total_tokens"], 8);
  EXPECT_EQ(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 2);

  const ResponseHeader chat{Endpoint::kChatCompletions, "chatcmpl-1", 1700000000, "m"};
  const json reply = completion_object(chat, "hi", FinishReason::kStop, {5, 0, 1});
  EXPECT_EQ(reply["object"], "chat.completion");
  EXPECT_EQ(reply["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "hi"}}));
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop");
}

TEST(ServerResponse, Chunks) {
  const ResponseHeader chat{Endpoint::kChatCompletions, "chatcmpl-1", 1700000000, "m"};
  json first = completion_chunk(chat, "Hel", true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", "Hel"}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(completion_chunk(chat, "lo", false)["choices"][0]["delta"].contains("role"));
  json last = final_chunk(chat, FinishReason::kStop);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  json usage = usage_chunk(chat, {4, 0, 2});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);

  const ResponseHeader completion{Endpoint::kCompletions, "cmpl-1", 1700000000, "m"};
  EXPECT_EQ(completion_chunk(completion, "abc", true)["choices"][0]["text"], "abc");
  EXPECT_EQ(completion_chunk(completion, "abc", true)["object"], "text_completion");
}

TEST(ServerResponse, HeadersAreUnique) {
  const ResponseHeader a = make_response_header(Endpoint::kChatCompletions, "m");
  const ResponseHeader b = make_response_header(Endpoint::kChatCompletions, "m");
  EXPECT_NE(a.id, b.id);
  EXPECT_TRUE(a.id.starts_with("chatcmpl-"));
  EXPECT_TRUE(make_response_header(Endpoint::kCompletions, "m").id.starts_with("cmpl-"));
}

TEST(ServerResponse, SseFramingAndInvalidUtf8) {
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  // A lone byte of a split character becomes U+FFFD instead of failing the response.
  EXPECT_EQ(to_json_text(json("x\xe2y")), "\"x\xef\xbf\xbdy\"");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(ServerResponse, ErrorBody) {
  EXPECT_EQ(error_body(invalid_request("bad", "top_p")),
            json::parse(R"({"error": {"message": "bad", "type": "invalid_request_error", "param": "top_p",
                                     "code": null}})"));
  const ApiError full = api_error_from_status(resource_exhausted("queue full"));
  EXPECT_EQ(full.http_status, 429);
  EXPECT_EQ(api_error_from_status(out_of_range("prompt is 600 tokens, the context holds 512")).code,
            "context_length_exceeded");
  EXPECT_EQ(api_error_from_status(internal_error("device failed")).http_status, 500);
}

TEST(ServerMetrics, PrometheusText) {
  EngineMetrics m;
  m.running = 3;
  m.waiting = 2;
  m.prompt_tokens_cached = 48;
  m.kv_blocks_used = 10;
  m.kv_blocks_free = 22;
  m.kv_blocks_total = 32;
  m.generated_tokens_per_second = 123.5;
  ResponseCounter responses;
  responses.count(200);
  responses.count(200);
  responses.count(429);
  const std::string text = render_metrics(m, responses.snapshot());
  for (const char* line : {"kuiper_requests_running 3\n", "kuiper_requests_waiting 2\n",
                           "kuiper_prompt_tokens_cached_total 48\n", "kuiper_kv_blocks_used 10\n",
                           "kuiper_kv_blocks_free 22\n", "kuiper_generated_tokens_per_second 123.5\n",
                           "kuiper_http_responses_total{code=\"200\"} 2\n",
                           "kuiper_http_responses_total{code=\"429\"} 1\n", "# TYPE kuiper_kv_blocks_total gauge\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
  // Every line is a comment or "name[{labels}] value" (the exposition format's grammar).
  const std::regex sample(R"([a-z_]+(\{[a-z_]+="[^"]*"\})? [-+0-9.e]+)");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(line.starts_with("# HELP ") || line.starts_with("# TYPE ") || std::regex_match(line, sample)) << line;
  }
}

TEST(ServerRequestStream, MergesWhatArrivedAndTimesOut) {
  auto stream = std::make_shared<RequestStream>();
  EXPECT_FALSE(stream->take(std::chrono::milliseconds(1)).arrived);
  OutputCallback feed = RequestStream::feeder(stream);
  std::thread engine([&] {
    for (int i = 0; i < 3; ++i) {
      RequestOutput out;
      out.text = std::string(1, char('a' + i));
      out.prompt_tokens = 4;
      out.completion_tokens = i + 1;
      out.finish = i == 2 ? FinishReason::kLength : FinishReason::kNone;
      feed(out);
    }
  });
  engine.join();
  StreamUpdate update = stream->take(std::chrono::seconds(5));
  EXPECT_TRUE(update.arrived);
  EXPECT_EQ(update.text, "abc");
  EXPECT_EQ(update.completion_tokens, 3);
  EXPECT_EQ(update.prompt_tokens, 4);
  EXPECT_EQ(update.finish, FinishReason::kLength);
  EXPECT_FALSE(stream->take(std::chrono::milliseconds(1)).arrived);
}

TEST(ServerRequestStream, WakesAWaitingHandler) {
  auto stream = std::make_shared<RequestStream>();
  OutputCallback feed = RequestStream::feeder(stream);
  std::thread engine([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    RequestOutput out;
    out.text = "x";
    feed(out);
  });
  const auto start = std::chrono::steady_clock::now();
  StreamUpdate update = stream->take(std::chrono::seconds(10));
  engine.join();
  EXPECT_TRUE(update.arrived);
  EXPECT_EQ(update.text, "x");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace kuiper::server
