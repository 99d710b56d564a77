#include "runtime/session.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <vector>

#include "core/errors.h"

namespace mb::runtime {

// Marks a session busy for one call (Session::busy_).
class Session::InUse {
 public:
  explicit InUse(Session& s) : s_(s) {
    if (s_.busy_.exchange(true, std::memory_order_acquire))
      throw InputError("this session is in use by another thread: give each thread its own session");
  }
  ~InUse() { s_.busy_.store(false, std::memory_order_release); }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;

 private:
  Session& s_;
};

Session::Session(std::shared_ptr<const gemma4::Gemma4Model> model, int64_t max_context)
    : model_(std::move(model)), max_context_(max_context) {
  if (max_context < 1 || max_context > model_->max_context())
    throw InputError(cat("session: max_context must be in [1, ", model_->max_context(), "], got ", max_context));
  model_->check_files_unchanged();
  state_ = model_->text().new_state(max_context);
  last_logits_ = Tensor::empty(DType::F32, {1, model_->config().text_config.vocab_size});
}

size_t Session::cache_bytes() const {
  size_t total = 0;
  for (const auto& c : state_->caches) total += c.bytes();
  return total;
}

void Session::reset() {
  InUse guard(*this);
  clear();
}

void Session::clear() {
  for (auto& c : state_->caches) c.reset();
  state_->position = 0;
  state_->next_block = 0;
  have_logits_ = false;
}

bool Session::truncate(int64_t n) {
  InUse guard(*this);
  if (n < 0 || n > state_->position) throw InputError(cat("truncate: ", n, " is outside [0, ", state_->position, "]"));
  for (const auto& c : state_->caches)
    if (!c.can_truncate(n)) return false;
  for (auto& c : state_->caches) c.truncate(n);
  if (n != state_->position) have_logits_ = false;
  state_->position = n;
  return true;
}

void Session::check_room(int64_t T) const {
  if (T < 1) throw InputError("no tokens to run");
  if (state_->position + T > max_context_)
    throw InputError(cat("context limit: ", state_->position, " tokens in the session + ", T, " new > max_context ",
                         max_context_));
}

void Session::check_finite(const Tensor& logits) const {
  const float* p = logits.data_as<const float>();
  const int64_t n = logits.numel(), V = logits.size(-1);
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i]))
      throw NumericsError(cat("the forward pass produced NaN/Inf logits (row ", i / V, " of ", n / V,
                              "); the checkpoint may hold non-finite weights (run `markbase validate ", model_->dir(),
                              "`), and `markbase trace ", model_->dir(), "` finds the first non-finite intermediate"));
}

template <class F>
void Session::run_forward(F&& forward) {
  const int64_t before = state_->position;
  try {
    if (model_->check_finite()) {
      NonFiniteTracer tracer(*model_->exec().backend, [this](const Tensor& t) { return model_->weight_name(t); });
      forward();
      tracer.finish();
      if (tracer.report().found) throw NumericsError(tracer.report().describe());
    } else {
      forward();
    }
  } catch (...) {
    roll_back(before);
    throw;
  }
}

void Session::roll_back(int64_t position) {
  bool can = true;
  for (const auto& c : state_->caches) can = can && c.can_truncate(position);
  if (can) {
    for (auto& c : state_->caches) c.truncate(position);
    state_->position = position;
  } else {
    clear();
  }
  have_logits_ = false;
}

void Session::decode_batch(std::span<Session* const> sessions, const int32_t* ids) {
  const size_t B = sessions.size();
  if (B == 0) throw InputError("decode_batch: no sessions");
  const Session& first = *sessions[0];
  for (size_t b = 0; b < B; ++b)
    for (size_t c = 0; c < b; ++c)
      if (sessions[b] == sessions[c])
        throw InputError(cat("decode_batch: sessions ", c, " and ", b, " are the same session"));
  std::deque<InUse> guards;  // every session busy for the step (released in reverse on any exit)
  std::vector<gemma4::DecoderState*> states;
  std::vector<int64_t> before;
  for (size_t b = 0; b < B; ++b) {
    Session& s = *sessions[b];
    guards.emplace_back(s);
    if (s.model_ != first.model_) throw InputError(cat("decode_batch: session ", b, " belongs to another model"));
    s.check_room(1);
    states.push_back(s.state_.get());
    before.push_back(s.state_->position);
  }
  first.model_->check_files_unchanged();
  const int64_t V = first.model_->config().text_config.vocab_size;
  Tensor logits = Tensor::empty(DType::F32, {int64_t(B), V});
  for (Session* s : sessions) s->have_logits_ = false;
  try {
    auto forward = [&] { first.model_->text().forward_batch(states, ids, logits); };
    if (first.model_->check_finite()) {
      NonFiniteTracer tracer(*first.model_->exec().backend, [&](const Tensor& t) { return first.model_->weight_name(t); });
      forward();
      tracer.finish();
      if (tracer.report().found) throw NumericsError(tracer.report().describe());
    } else {
      forward();
    }
  } catch (...) {
    // Sessions the step never reached are where they were; the others go back (a repeated session was
    // refused before anything ran).
    for (size_t b = 0; b < B; ++b)
      if (sessions[b]->state_->position != before[b]) sessions[b]->roll_back(before[b]);
    throw;
  }
  for (size_t b = 0; b < B; ++b) {
    Session& s = *sessions[b];
    std::memcpy(s.last_logits_.data(), logits.data_as<const float>() + int64_t(b) * V, s.last_logits_.nbytes());
    s.check_finite(s.last_logits_);
    s.have_logits_ = true;
  }
}

void Session::step_batch(std::span<Session* const> sessions, const int32_t* ids, std::span<Sampler* const> samplers,
                         int32_t* out) {
  if (samplers.size() != sessions.size())
    throw InputError(cat("step_batch: ", sessions.size(), " sessions but ", samplers.size(), " samplers"));
  decode_batch(sessions, ids);
  for (size_t b = 0; b < sessions.size(); ++b) out[b] = sessions[b]->sample(*samplers[b]);  // (each guarded)
}

Tensor Session::prefill(const int32_t* ids, int64_t T, bool all_logits) {
  return prefill_embeds(Tensor(), ids, nullptr, T, all_logits);
}

Tensor Session::prefill_embeds(const Tensor& x, const int32_t* ids, const int32_t* block_ids, int64_t T, bool all_logits) {
  InUse guard(*this);
  check_room(T);
  model_->check_files_unchanged();
  have_logits_ = false;
  Tensor out = all_logits ? Tensor::empty(DType::F32, {T, model_->config().text_config.vocab_size}) : last_logits_;
  const gemma4::TextDecoder& text = model_->text();
  run_forward([&] {
    if (x.defined() || block_ids) text.forward_embeds(*state_, x, ids, block_ids, T, all_logits, out);
    else text.forward(*state_, ids, T, all_logits, out);
  });
  if (all_logits) {
    // The last row doubles as the next step's sampling input.
    std::memcpy(last_logits_.data(), out.data_as<const float>() + (T - 1) * out.size(1), last_logits_.nbytes());
  }
  check_finite(out);
  have_logits_ = true;
  return out;
}

Tensor Session::decode(int32_t id) {
  InUse guard(*this);
  check_room(1);
  model_->check_files_unchanged();
  have_logits_ = false;
  run_forward([&] { model_->text().forward(*state_, &id, 1, false, last_logits_); });
  check_finite(last_logits_);
  have_logits_ = true;
  return last_logits_;
}

int32_t Session::sample(Sampler& sampler) {
  InUse guard(*this);
  if (!have_logits_) throw InputError("sample: the session has no logits yet (prefill or decode first)");
  return sampler.sample(last_logits_.data_as<const float>(), last_logits_.size(1));
}

int32_t Session::step(int32_t id, Sampler& sampler) {
  decode(id);
  return sample(sampler);
}

NonFiniteReport trace_nonfinite(const gemma4::Gemma4Model& model, const int32_t* ids, int64_t T, const Tensor& x,
                                const int32_t* block_ids) {
  if (T < 1) throw InputError("trace: no tokens");
  model.check_files_unchanged();
  const gemma4::TextDecoder& text = model.text();
  auto state = text.new_state(T);
  Tensor logits = Tensor::empty(DType::F32, {T, model.config().text_config.vocab_size});
  NonFiniteTracer tracer(*model.exec().backend, [&model](const Tensor& t) { return model.weight_name(t); });
  try {
    text.forward_embeds(*state, x, ids, block_ids, T, true, logits);
  } catch (const NumericsError&) {
    if (!tracer.report().found) throw;
  }
  tracer.finish();
  return tracer.report();
}

}  // namespace mb::runtime
