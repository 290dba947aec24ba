// The OpenAI formatters of generated output: chat.completion and its chat.completion.chunk
// stream (/v1/chat/completions), text_completion and its stream (/v1/completions).
//
// Goals: the bytes these endpoints have always written (clients and tests pin them): a
// stream's role chunk (chat) or echoed prompt (completions, carrying the prompt's logprobs
// when asked for) first, a reasoning_content or content chunk per token, a chunk per tool
// call, a finish chunk, the usage chunk when asked for, then "data: [DONE]"; an error
// mid-stream is the stream's last event (no [DONE]), so a client cannot take a cut answer for
// a complete one.
// Non-goals: the response builders themselves (openai_types.h), other APIs' shapes.
//
// Thread safety: one formatter per session (output_formatter.h).
#pragma once

#include <span>
#include <string>

#include "server/openai_objects.h"
#include "server/output_formatter.h"

namespace shardlm::server {

class ChatCompletionFormatter : public OutputFormatter {
 public:
  ChatCompletionFormatter(ResponseMeta meta, const GenerationOptions& options);
  void StreamStart(std::string* sse) override;
  void StreamDelta(const OutputDelta& delta, const TokenLogprobInfo* logprob,
                   std::string* sse) override;
  void StreamEnd(const OutputDelta& last, const GenerationResult& result,
                 std::string* sse) override;
  void StreamError(const ApiError& error, std::string* sse) override;
  Json Whole(const GenerationResult& result) override;

 private:
  bool logprobs_;
  bool include_usage_;
  bool role_sent_ = false;
  int tool_calls_sent_ = 0;
};

class TextCompletionFormatter : public OutputFormatter {
 public:
  // `echo_prefix`: the prompt text when the request asked for echo, else "".
  TextCompletionFormatter(ResponseMeta meta, const GenerationOptions& options,
                          std::string echo_prefix);
  void StreamStart(std::string* sse) override;
  // The echoed prompt's chunk, carrying the prompt's logprobs.
  void StreamPromptLogprobs(std::span<const TokenLogprobInfo> prompt, std::string* sse) override;
  void StreamDelta(const OutputDelta& delta, const TokenLogprobInfo* logprob,
                   std::string* sse) override;
  void StreamEnd(const OutputDelta& last, const GenerationResult& result,
                 std::string* sse) override;
  void StreamError(const ApiError& error, std::string* sse) override;
  // With the prompt's logprobs, they lead the output's in the one logprobs object.
  Json Whole(const GenerationResult& result) override;

 private:
  void StreamEcho(std::string* sse);

  bool logprobs_;
  bool include_usage_;
  std::string echo_prefix_;
  bool echo_sent_ = false;
};

}  // namespace shardlm::server
