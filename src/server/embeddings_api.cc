// POST /v1/embeddings: parsing, checks and the response (see embeddings_api.h).
#include "server/embeddings_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/elapsed.h"
#include "server/completion_session.h"
#include "server/embedding_runner.h"
#include "server/request_parser.h"

namespace shardlm::server {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

constexpr const char* kInputShapes =
    "expected a string, an array of strings, an array of token ids or an array of token-id "
    "arrays";

// A non-empty array of token ids.
Result<EmbeddingInput> TokensInput(const Parser& p, const Json& ids, const std::string& name) {
  if (ids.empty()) return p.Fail(name, "an input may not be empty");
  EmbeddingInput input{.param = name, .is_tokens = true};
  for (const Json& id : ids) {
    int64_t value = 0;
    if (!id.is_number()) return p.Fail(name, "expected token ids (integers from 0)");
    SHARDLM_TRY(p.IntValue(name, id, 0, kInt32Max, &value));
    input.tokens.push_back(TokenId(value));
  }
  return input;
}

Result<EmbeddingInput> TextInput(const Parser& p, const Json& text, const std::string& name) {
  if (text.get_ref<const std::string&>().empty()) {
    return p.Fail(name, "an input may not be empty");
  }
  return EmbeddingInput{.param = name, .text = text.get<std::string>()};
}

// One input (a string or token ids), or an array of them of one kind (its first decides).
Status ParseInput(const Parser& p, EmbeddingsRequest& r) {
  const Json* input = p.Find("input");
  if (!input) return p.Fail("input", "missing");
  if (input->is_string()) {
    SHARDLM_ASSIGN_OR_RETURN(EmbeddingInput text, TextInput(p, *input, "input"));
    r.inputs.push_back(std::move(text));
    return Status::Ok();
  }
  if (!input->is_array() || input->empty()) return p.Fail("input", kInputShapes);
  if (input->size() > kMaxEmbeddingInputs) {
    return p.Fail("input", fmt::format("{} inputs (at most {} per request)", input->size(),
                                       kMaxEmbeddingInputs));
  }
  const Json& first = (*input)[0];
  if (first.is_number()) {
    SHARDLM_ASSIGN_OR_RETURN(EmbeddingInput tokens, TokensInput(p, *input, "input"));
    r.inputs.push_back(std::move(tokens));
    return Status::Ok();
  }
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    const std::string name = fmt::format("input[{}]", i);
    const bool same_kind =
        (item.is_string() && first.is_string()) || (item.is_array() && first.is_array());
    if (!same_kind) return p.Fail(name, kInputShapes);
    SHARDLM_ASSIGN_OR_RETURN(EmbeddingInput one, item.is_string() ? TextInput(p, item, name)
                                                                  : TokensInput(p, item, name));
    r.inputs.push_back(std::move(one));
  }
  return Status::Ok();
}

Status ParseOptions(const Parser& p, EmbeddingsRequest& r) {
  SHARDLM_TRY(p.String("model", &r.model));
  std::string format = "float";
  SHARDLM_TRY(p.String("encoding_format", &format));
  if (format == "float") {
    r.encoding = EmbeddingEncoding::kFloat;
  } else if (format == "base64") {
    r.encoding = EmbeddingEncoding::kBase64;
  } else {
    return p.Fail("encoding_format", "expected \"float\" or \"base64\"");
  }
  if (p.Find("dimensions")) {
    return p.Fail("dimensions",
                  "this server returns each model's embeddings at their full size and cannot "
                  "shorten them: leave out 'dimensions'");
  }
  return Status::Ok();
}

Result<EmbeddingsRequest> ParseEmbeddings(const Json& body, std::string* param) {
  SHARDLM_TRY(CheckObject(body, param));
  const Parser p{body, param};
  EmbeddingsRequest r;
  SHARDLM_TRY(ParseInput(p, r));
  SHARDLM_TRY(ParseOptions(p, r));
  return r;
}

// Every input as tokens, checked against the vocabulary and the context, or the error naming
// the input's parameter. An embedding's prompt may fill the whole context (nothing follows).
std::variant<std::vector<std::vector<TokenId>>, ApiError> Tokenize(
    const Engine& engine, const EmbeddingsRequest& request) {
  const Tokenizer& tok = engine.tokenizer();
  const int32_t n_ctx = engine.info().n_ctx;
  std::vector<std::vector<TokenId>> prompts;
  for (const EmbeddingInput& input : request.inputs) {
    std::vector<TokenId> tokens = input.is_tokens ? input.tokens
                                                  : tok.Encode(input.text, /*add_special=*/true,
                                                               /*parse_special=*/true);
    if (tokens.empty()) {
      return ErrorFromStatus(InvalidArgument("{} has no tokens", input.param), input.param);
    }
    for (TokenId id : tokens) {
      if (id >= tok.n_vocab()) {
        return ErrorFromStatus(InvalidArgument("{}: token id {} is outside the vocabulary (0 to "
                                               "{})",
                                               input.param, id, tok.n_vocab() - 1),
                               input.param);
      }
    }
    if (n_ctx > 0 && int64_t(tokens.size()) > n_ctx) {
      return ErrorFromStatus(OutOfRange("context_length_exceeded: {} has {} tokens, the context "
                                        "holds {}",
                                        input.param, tokens.size(), n_ctx),
                             input.param);
    }
    prompts.push_back(std::move(tokens));
  }
  return prompts;
}

}  // namespace

Result<EmbeddingsRequest> EmbeddingsRequestFromJSON(const Json& body, std::string* param) {
  return GuardParse([&] { return ParseEmbeddings(body, param); }, param);
}

ApiError EmbeddingsDisabledError() {
  ApiError e;
  e.http_status = 400;
  e.message =
      "this server does not compute embeddings: start it with `shardlm serve --embeddings` to "
      "serve /v1/embeddings";
  e.code = "embeddings_disabled";
  return e;
}

std::vector<float> L2Normalized(std::span<const float> v) {
  double sum = 0.0;
  for (float x : v) sum += double(x) * double(x);
  const double norm = std::sqrt(sum);
  std::vector<float> out(v.begin(), v.end());
  if (norm > 0.0) {
    for (float& x : out) x = float(double(x) / norm);
  }
  return out;
}

std::string Base64Floats(std::span<const float> v) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes;
  bytes.reserve(v.size() * 4);
  for (float x : v) {
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    for (int b = 0; b < 4; ++b) bytes.push_back(uint8_t(bits >> (8 * b)));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = uint32_t(bytes[i]) << 16;
    if (n > 1) group |= uint32_t(bytes[i + 1]) << 8;
    if (n > 2) group |= uint32_t(bytes[i + 2]);
    // n bytes fill n + 1 characters; '=' pads the group to 4.
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(group >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

Json EmbeddingsJSON(const std::string& model, const std::vector<std::vector<float>>& vectors,
                    EmbeddingEncoding encoding, int64_t prompt_tokens) {
  Json data = Json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    Json embedding =
        encoding == EmbeddingEncoding::kBase64 ? Json(Base64Floats(vectors[i])) : Json(vectors[i]);
    data.push_back(
        Json{{"object", "embedding"}, {"index", i}, {"embedding", std::move(embedding)}});
  }
  return Json{{"object", "list"},
              {"data", std::move(data)},
              {"model", model},
              {"usage", Json{{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

std::optional<std::variant<Json, ApiError>> RunEmbeddings(
    Engine& engine, const EmbeddingsRequest& request, const std::string& id,
    const EmbeddingsLog& log, std::chrono::milliseconds poll,
    const std::function<bool()>& client_gone) {
  const auto start = std::chrono::steady_clock::now();
  auto prompts = Tokenize(engine, request);
  if (auto* e = std::get_if<ApiError>(&prompts)) return *e;
  const auto& tokens = std::get<std::vector<std::vector<TokenId>>>(prompts);
  std::vector<std::string> params;
  for (const EmbeddingInput& input : request.inputs) params.push_back(input.param);
  auto ran = RunEmbeddingInputs(engine, tokens, params, poll, client_gone);
  if (!ran) return std::nullopt;
  if (auto* e = std::get_if<ApiError>(&*ran)) return *e;
  std::vector<std::vector<float>> vectors;
  for (const std::vector<float>& v : std::get<std::vector<std::vector<float>>>(*ran)) {
    vectors.push_back(L2Normalized(v));
  }
  int64_t prompt_tokens = 0;
  for (const std::vector<TokenId>& t : tokens) prompt_tokens += int64_t(t.size());
  if (log) {
    log(fmt::format("request id={} endpoint=embeddings inputs={} prompt_tokens={} total_ms={:.1f}",
                    id, tokens.size(), prompt_tokens, MsSince(start)));
  }
  return EmbeddingsJSON(engine.info().model_name, vectors, request.encoding, prompt_tokens);
}

}  // namespace shardlm::server
