// One embeddings request's inputs through the engine. See embedding_runner.h.
#include "server/embedding_runner.h"

#include <fmt/format.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "server/completion_session.h"

namespace shardlm::server {
namespace {

// The finish events of one request's inputs, filled by the engine's thread.
struct Results {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<FinishEvent>> events;  // [input]
  size_t n_finished = 0;
  bool failed = false;  // an input ended without its embedding
};

// Submits every prompt and waits for them all. Lifetime: Results is shared with the
// callbacks, which may run after this is gone.
class InputRun {
 public:
  InputRun(Engine& engine, std::chrono::milliseconds poll, const std::function<bool()>& gone)
      : engine_(engine), poll_(poll), client_gone_(gone), results_(std::make_shared<Results>()) {}
  ~InputRun() {
    // Leaving early (an error, a client gone): what still runs is of no use.
    for (RequestId id : ids_) engine_.Cancel(id);
  }

  // Ok once every input finished or one failed; a refusal's error; nullopt when the client
  // left.
  std::optional<std::variant<std::monostate, ApiError>> Run(
      const std::vector<std::vector<TokenId>>& prompts, const std::vector<std::string>& params) {
    results_->events.resize(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (;;) {
        Result<RequestId> id = engine_.Submit(Request(prompts[i]), Callbacks(i));
        if (id.ok()) {
          ids_.push_back(*id);
          break;
        }
        // A full queue: wait for one of this request's inputs to leave it, when some run.
        const size_t finished = Finished();
        if (!QueueFull(id.status()) || finished == ids_.size()) {
          return ErrorFromStatus(id.status(), params[i]);
        }
        if (!WaitFinished(finished + 1)) return std::nullopt;
      }
    }
    if (!WaitFinished(prompts.size())) return std::nullopt;
    return std::monostate{};
  }
  const std::vector<std::optional<FinishEvent>>& events() const { return results_->events; }

 private:
  static EngineRequest Request(const std::vector<TokenId>& prompt) {
    EngineRequest request;
    request.prompt = prompt;
    request.kind = RequestKind::kEmbedding;
    return request;
  }
  // The engine's way of saying so (Engine::Submit): kOutOfRange that is not about length.
  static bool QueueFull(const Status& status) {
    return status.code() == StatusCode::kOutOfRange &&
           status.message().find("context_length_exceeded") == std::string::npos;
  }
  RequestCallbacks Callbacks(size_t index) const {
    RequestCallbacks callbacks;
    callbacks.on_finish = [results = results_, index](const FinishEvent& event) {
      std::lock_guard<std::mutex> lock(results->mu);
      results->events[index] = event;
      ++results->n_finished;
      if (event.reason != FinishReason::kStop) results->failed = true;
      results->cv.notify_all();
    };
    return callbacks;
  }
  size_t Finished() const {
    std::lock_guard<std::mutex> lock(results_->mu);
    return results_->n_finished;
  }
  // Waits until `target` inputs finished or one failed; false when the client left first.
  bool WaitFinished(size_t target) {
    std::unique_lock<std::mutex> lock(results_->mu);
    auto done = [&] { return results_->n_finished >= target || results_->failed; };
    while (!done()) {
      results_->cv.wait_for(lock, poll_);
      if (done() || !client_gone_) continue;
      lock.unlock();
      const bool gone = client_gone_();
      lock.lock();
      if (gone) return false;
    }
    return true;
  }

  Engine& engine_;
  std::chrono::milliseconds poll_;
  const std::function<bool()>& client_gone_;
  std::shared_ptr<Results> results_;  // shared with the callbacks, which may outlive this
  std::vector<RequestId> ids_;        // submitted; cancelled when this goes (idempotent)
};

}  // namespace

std::optional<std::variant<std::vector<std::vector<float>>, ApiError>> RunEmbeddingInputs(
    Engine& engine, const std::vector<std::vector<TokenId>>& prompts,
    const std::vector<std::string>& params, std::chrono::milliseconds poll,
    const std::function<bool()>& client_gone) {
  InputRun run(engine, poll, client_gone);
  auto ran = run.Run(prompts, params);
  if (!ran) return std::nullopt;
  if (auto* e = std::get_if<ApiError>(&*ran)) return *e;
  std::vector<std::vector<float>> vectors;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::optional<FinishEvent>& event = run.events()[i];
    if (event && event->reason == FinishReason::kStop && !event->embedding.empty()) {
      vectors.push_back(event->embedding);
      continue;
    }
    // The input that failed (another may not have finished yet: it is cancelled).
    if (!event || event->reason == FinishReason::kStop) continue;
    return EngineError(event->reason == FinishReason::kError
                           ? event->error
                           : Status(StatusCode::kInternal,
                                    fmt::format("{} ended without an embedding ({})", params[i],
                                                FinishReasonName(event->reason))));
  }
  if (vectors.size() != prompts.size()) {
    return EngineError(Status(StatusCode::kInternal, "an input ended without an embedding"));
  }
  return vectors;
}

}  // namespace shardlm::server
