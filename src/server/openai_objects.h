// OpenAI response objects: chat.completion and text_completion, whole and as SSE chunks,
// with their usage, timings, logprobs and tool calls, built from the typed results of
// openai_types.h. The Responses and Messages APIs reuse the usage, timings and pin parts.
//
// Thread safety: free functions of plain values.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/openai_types.h"

namespace shardlm::server {

Json UsageJSON(const RequestUsage& usage);
Json TimingsJSON(const RequestUsage& usage);
// Sets response["pin"] to the position ranges a bounded KV pool kept resident for the
// request ([[begin, end], ...], the request's extension field and its standing prefix);
// leaves the response alone when nothing was pinned.
void AddPinned(const RequestUsage& usage, Json& response);
Json ChatLogprobsJSON(const std::vector<TokenLogprobInfo>& logprobs);
Json ToolCallJSON(const ToolCall& call, std::optional<int> index = std::nullopt);

Json ChatCompletionJSON(const ResponseMeta& meta, const ChatResult& result,
                        const RequestUsage& usage);
// A chat.completion.chunk: `delta` as given, finish_reason null when empty.
Json ChatChunkJSON(const ResponseMeta& meta, const Json& delta, const std::string& finish_reason,
                   const Json& logprobs = nullptr);
// The final usage-only chunk (stream_options.include_usage): choices [].
Json UsageChunkJSON(const ResponseMeta& meta, const char* object, const RequestUsage& usage);

Json CompletionJSON(const ResponseMeta& meta, const std::string& text,
                    const std::string& finish_reason, const RequestUsage& usage,
                    const std::optional<std::vector<TokenLogprobInfo>>& logprobs);
// Legacy completions' logprobs object: {tokens, token_logprobs, top_logprobs}.
Json CompletionLogprobsJSON(std::span<const TokenLogprobInfo> logprobs);
// A streamed text_completion chunk; `logprobs` (CompletionLogprobsJSON of the chunk's
// tokens) or null.
Json CompletionChunkJSON(const ResponseMeta& meta, const std::string& text,
                         const std::string& finish_reason, const Json& logprobs = nullptr);

}  // namespace shardlm::server
