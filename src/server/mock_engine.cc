// A model-free Engine and byte tokenizer for HTTP tests. See mock_engine.h.
#include "server/mock_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "cache/atomic_file.h"
#include "grammar/byte_automaton.h"

namespace shardlm::server {

MockTokenizer::MockTokenizer()
    : specials_{"<|im_end|>",   "<|im_start|>", "<think>",    "</think>",
                "<tool_call>",  "</tool_call>", "<|channel>", "<channel|>",
                "<|tool_call>", "<tool_call|>", "<|\"|>",     "<|turn>"} {
  for (int b = 0; b < 256; ++b) byte_text_[b] = std::string(1, static_cast<char>(b));
}

std::vector<TokenId> MockTokenizer::Encode(std::string_view text, bool /*add_special*/,
                                           bool parse_special) const {
  std::vector<TokenId> ids;
  size_t i = 0;
  while (i < text.size()) {
    bool matched = false;
    for (size_t s = 0; s < specials_.size() && !matched; ++s) {
      if (IsControl(256 + static_cast<TokenId>(s)) && !parse_special) continue;
      if (text.substr(i, specials_[s].size()) == specials_[s]) {
        ids.push_back(256 + static_cast<TokenId>(s));
        i += specials_[s].size();
        matched = true;
      }
    }
    if (!matched) ids.push_back(static_cast<unsigned char>(text[i++]));
  }
  return ids;
}

std::string MockTokenizer::Piece(TokenId id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) return "";
  if (id < 256) return byte_text_[id];
  if (IsControl(id) && !render_special) return "";
  return specials_[id - 256];
}

std::string_view MockTokenizer::TokenText(TokenId id) const {
  if (id < 0 || id >= n_vocab()) return "";
  return id < 256 ? std::string_view(byte_text_[id]) : std::string_view(specials_[id - 256]);
}

TokenId MockTokenizer::FindToken(std::string_view text) const {
  for (size_t s = 0; s < specials_.size(); ++s) {
    if (specials_[s] == text) return 256 + static_cast<TokenId>(s);
  }
  if (text.size() == 1) return static_cast<unsigned char>(text[0]);
  return -1;
}

MockEngine::MockEngine(MockEngineOptions options) : options_(std::move(options)) {
  info_.model_name = options_.model_name;
  info_.architecture = "mock";
  info_.n_ctx = options_.n_ctx;
  info_.n_vocab = tokenizer_.n_vocab();
  info_.n_parallel = options_.n_parallel;
  info_.embeddings = options_.embeddings;
  info_.n_embd = options_.n_embd;
  slot_tokens_.resize(size_t(std::max(options_.n_parallel, 1)));
  info_.stages = options_.stages;
  if (info_.stages.empty()) {
    StageInfo stage;
    stage.layers = LayerRange{0, 2};
    stage.first = stage.last = true;
    stage.device = "cpu";
    stage.threads = 2;
    stage.weight_bytes = 1000;
    stage.kv_bytes = 2000;
    info_.stages.push_back(stage);
  }
  stats_.slots_total = options_.n_parallel;
  stats_.kv_pages_total = 64;
  worker_ = std::thread([this] { Loop(); });
}

MockEngine::~MockEngine() {
  std::deque<Pending> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  left.swap(queue_);
  for (Pending& p : left) {
    FinishEvent fin;
    fin.reason = FinishReason::kCancelled;
    p.callbacks.on_finish(fin);
  }
}

void MockEngine::SetReply(std::string reply) {
  std::lock_guard<std::mutex> lock(mu_);
  reply_ = std::move(reply);
}

void MockEngine::Pause(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
  }
  cv_.notify_all();
}

void MockEngine::SetStageDown(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  down_ = std::move(status);
}

void MockEngine::FailAfterTokens(int after_tokens, Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_after_ = status.ok() ? -1 : after_tokens;
  fail_status_ = std::move(status);
}

Status MockEngine::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return down_;
}

bool MockEngine::ShouldFail(int32_t tokens_out, Status* status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fail_after_ < 0 || tokens_out < fail_after_) return false;
  *status = fail_status_;
  if (fail_status_.code() == StatusCode::kUnavailable) down_ = fail_status_;
  return true;
}

Result<RequestId> MockEngine::Submit(EngineRequest request, RequestCallbacks callbacks) {
  if (request.kind == RequestKind::kEmbedding && !options_.embeddings) {
    return Unsupported("this engine computes no embeddings: start it with --embeddings");
  }
  const int32_t generated = request.kind == RequestKind::kEmbedding ? 0 : 1;
  if (static_cast<int32_t>(request.prompt.size()) + generated > options_.n_ctx) {
    return OutOfRange("context_length_exceeded: the prompt has {} tokens, the context {}",
                      request.prompt.size(), options_.n_ctx);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!down_.ok()) return down_;
  if (static_cast<int32_t>(queue_.size()) >= options_.max_queue) {
    return OutOfRange("the queue is full ({} requests)", queue_.size());
  }
  RequestId id = next_id_++;
  last_prompt_ = request.prompt;
  stats_.requests_total++;
  stats_.prompt_tokens_total += static_cast<int64_t>(request.prompt.size());
  queue_.push_back(Pending{id, std::move(request), std::move(callbacks)});
  cv_.notify_all();
  return id;
}

std::string MockEngine::LastPromptText() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string text;
  for (TokenId t : last_prompt_) text += tokenizer_.Piece(t, /*render_special=*/true);
  return text;
}

void MockEngine::Cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_requests_.push_back(id);
}

int64_t MockEngine::cancel_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(cancel_requests_.size());
}

EngineStats MockEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.queue_length = static_cast<int32_t>(queue_.size());
  s.slots_busy = busy_ ? 1 : 0;
  s.kv_pages_used = busy_ ? 1 : 0;
  return s;
}

bool MockEngine::IsCancelled(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(cancel_requests_.begin(), cancel_requests_.end(), id) != cancel_requests_.end();
}

void MockEngine::Loop() {
  while (true) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || (!paused_ && !queue_.empty()); });
      if (stop_) return;
      p = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    Run(p);
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
}

std::string MockEngine::ReplyFor(const EngineRequest& request) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!reply_.empty()) return reply_;
  std::string prompt;
  for (TokenId t : request.prompt) prompt += tokenizer_.Piece(t);
  return prompt.substr(prompt.size() > 16 ? prompt.size() - 16 : 0);
}

std::vector<float> MockEmbedding(const std::vector<TokenId>& prompt, int32_t n_embd) {
  std::vector<float> out(size_t(std::max(n_embd, 0)));
  for (size_t i = 0; i < out.size(); ++i) {
    double sum = 0;
    for (TokenId t : prompt) sum += double(t % 7) - double(i);
    out[i] = prompt.empty() ? 0.0f : float(sum / double(prompt.size()));
  }
  return out;
}

float MockPromptLogprob(int position) { return -0.25f * float(position); }

bool MockEngine::RunPromptOutputs(Pending& p) {
  const EngineRequest& req = p.request;
  FinishEvent fin;
  fin.usage.prompt_tokens = static_cast<int32_t>(req.prompt.size());
  if (req.kind == RequestKind::kEmbedding) {
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    if (ShouldFail(0, &fin.error)) {
      fin.reason = FinishReason::kError;
    } else if (IsCancelled(p.id)) {
      fin.reason = FinishReason::kCancelled;
      cancelled_++;
    } else {
      fin.embedding = MockEmbedding(req.prompt, options_.n_embd);
    }
    FinishEarly(p, fin);
    return false;
  }
  if (!req.want_prompt_logprobs || !p.callbacks.on_prompt_logprobs) return true;
  std::vector<TokenEvent> events;
  for (size_t i = 1; i < req.prompt.size(); ++i) {
    TokenEvent ev;
    ev.token = req.prompt[i];
    ev.logprob = MockPromptLogprob(int(i));
    for (int32_t k = 0; k < req.sampling.n_logprobs; ++k) {
      ev.top.push_back(TokenLogprob{(req.prompt[i] + k) % 256, ev.logprob - 0.125f * float(k)});
    }
    events.push_back(std::move(ev));
  }
  if (p.callbacks.on_prompt_logprobs(events)) return true;
  cancelled_++;
  fin.reason = FinishReason::kCancelled;
  FinishEarly(p, fin);
  return false;
}

void MockEngine::FinishEarly(Pending& p, const FinishEvent& fin) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot_tokens_[0] = p.request.prompt;
    busy_ = false;  // free before the finish is told, as in Run
  }
  p.callbacks.on_finish(fin);
}

void MockEngine::Run(Pending& p) {
  if (!RunPromptOutputs(p)) return;
  const EngineRequest& req = p.request;
  std::string reply = ReplyFor(req);
  FinishEvent fin;
  fin.reason = FinishReason::kStop;
  std::string matched_stop;  // the stop string that cuts the reply first
  for (const std::string& stop : req.stop) {
    size_t pos = reply.find(stop);
    if (pos != std::string::npos) reply.resize(pos), matched_stop = stop;
  }
  std::vector<TokenId> tokens = tokenizer_.Encode(reply, false, true);
  fin.usage.prompt_tokens = static_cast<int32_t>(req.prompt.size());
  std::unique_ptr<grammar::ByteAutomaton> constraint;
  grammar::ByteAutomaton::StateId state = grammar::ByteAutomaton::kDead;
  if (req.grammar) {
    constraint = std::make_unique<grammar::ByteAutomaton>(req.grammar);
    state = constraint->initial();
  }
  // The text of a token as the real engine gives it: CONTROL tokens only when asked for.
  auto text = [&](TokenId t) {
    const bool rendered = std::find(req.rendered_specials.begin(), req.rendered_specials.end(),
                                    t) != req.rendered_specials.end();
    return tokenizer_.Piece(t, rendered);
  };
  for (TokenId t : tokens) {
    if (req.max_tokens >= 0 && fin.usage.completion_tokens >= req.max_tokens) {
      fin.reason = FinishReason::kLength;
      break;
    }
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    if (IsCancelled(p.id)) {
      fin.reason = FinishReason::kCancelled;
      break;
    }
    if (ShouldFail(fin.usage.completion_tokens, &fin.error)) {
      fin.reason = FinishReason::kError;
      break;
    }
    if (constraint) {
      state = constraint->Walk(state, text(t));
      if (state == grammar::ByteAutomaton::kDead) {
        fin.reason = FinishReason::kError;
        fin.error = InvalidArgument("mock: reply token {} breaks the output constraint",
                                    fin.usage.completion_tokens);
        break;
      }
    }
    TokenEvent ev;
    ev.token = t;
    ev.text = text(t);
    if (req.want_logprobs) {
      ev.logprob = -0.5f;
      for (int32_t k = 0; k < req.sampling.n_logprobs; ++k) {
        ev.top.push_back(TokenLogprob{(t + k) % 256, -0.5f - k});
      }
    }
    fin.usage.completion_tokens++;
    if (!p.callbacks.on_token(ev)) {
      fin.reason = FinishReason::kCancelled;
      break;
    }
    if (constraint && constraint->IsComplete(state)) break;
  }
  if (fin.reason == FinishReason::kStop) fin.stop_sequence = matched_stop;
  if (fin.reason == FinishReason::kCancelled) cancelled_++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.generated_tokens_total += fin.usage.completion_tokens;
  }
  fin.usage.prefill_ms = 1.0;
  fin.usage.decode_ms = 1.0 + fin.usage.completion_tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<TokenId>& held = slot_tokens_[0];
    held = req.prompt;
    held.insert(held.end(), tokens.begin(), tokens.begin() + fin.usage.completion_tokens);
    // The slot is free before the request says it finished, as the scheduler's is: a client
    // that saves or erases the slot right after its answer finds it idle.
    busy_ = false;
  }
  p.callbacks.on_finish(fin);
}

// The mock's slot file: the magic, then the token ids as 4-byte values.
constexpr std::string_view kMockSlotMagic = "MOCKSLOT";

Status MockEngine::CheckSlotLocked(int32_t slot) const {
  if (slot < 0 || slot >= options_.n_parallel) return NotFound("slot {} does not exist", slot);
  if (slot == 0 && busy_) return Conflict("slot 0 is processing a request");
  return Status::Ok();
}

std::vector<SlotInfo> MockEngine::Slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SlotInfo> slots;
  for (int32_t i = 0; i < options_.n_parallel; ++i) {
    SlotInfo info{.id = i, .n_tokens = int32_t(slot_tokens_[size_t(i)].size())};
    if (i == 0 && busy_) info.state = SlotState::kProcessing;
    slots.push_back(info);
  }
  return slots;
}

Result<SlotSaveResult> MockEngine::SaveSlot(int32_t slot, const std::filesystem::path& file) {
  std::vector<uint8_t> bytes(kMockSlotMagic.begin(), kMockSlotMagic.end());
  int32_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SHARDLM_TRY(CheckSlotLocked(slot));
    const std::vector<TokenId>& tokens = slot_tokens_[size_t(slot)];
    if (tokens.empty()) return InvalidArgument("slot {} holds no tokens", slot);
    const auto* raw = reinterpret_cast<const uint8_t*>(tokens.data());
    bytes.insert(bytes.end(), raw, raw + tokens.size() * sizeof(TokenId));
    n = int32_t(tokens.size());
  }
  SHARDLM_TRY(WriteFileAtomic(file, bytes));
  return SlotSaveResult{.n_saved = n, .n_written = bytes.size()};
}

Result<SlotRestoreResult> MockEngine::RestoreSlot(int32_t slot, const std::filesystem::path& file) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    SHARDLM_TRY(CheckSlotLocked(slot));
  }
  SHARDLM_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(file, 1 << 20));
  const size_t body = bytes.size() - std::min(bytes.size(), kMockSlotMagic.size());
  if (bytes.size() <= kMockSlotMagic.size() || body % sizeof(TokenId) != 0 ||
      !std::equal(kMockSlotMagic.begin(), kMockSlotMagic.end(), bytes.begin())) {
    return InvalidData("'{}' is not a slot file", file.filename().string());
  }
  std::vector<TokenId> tokens(body / sizeof(TokenId));
  std::memcpy(tokens.data(), bytes.data() + kMockSlotMagic.size(), body);
  std::lock_guard<std::mutex> lock(mu_);
  SHARDLM_TRY(CheckSlotLocked(slot));
  slot_tokens_[size_t(slot)] = std::move(tokens);
  return SlotRestoreResult{.n_restored = int32_t(slot_tokens_[size_t(slot)].size()),
                           .n_read = bytes.size()};
}

Result<int32_t> MockEngine::EraseSlot(int32_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  SHARDLM_TRY(CheckSlotLocked(slot));
  const int32_t n = int32_t(slot_tokens_[size_t(slot)].size());
  slot_tokens_[size_t(slot)].clear();
  return n;
}

}  // namespace shardlm::server
