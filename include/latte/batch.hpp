// Batched evaluation: several Sessions of one Model advance in one forward pass per step, so the
// weights are read once for all of them (batched decode of many conversations).
//
//   latte::Session* all[] = {&a, &b, &c};  const latte::Token next[] = {ta, tb, tc};
//   latte::decode_batch(all, next);         // a.logits(), b.logits(), c.logits() are then fresh
#pragma once

#include <latte/session.hpp>
#include <latte/token.hpp>

#include <span>

namespace latte {

/// Appends `tokens[i]` (one or more ids) to `sessions[i]` for every i and runs them together: one
/// forward pass per chunk of at most 256 new tokens in all (whole sequences are split across
/// chunks where needed). Afterwards each session is exactly as if it had run eval(tokens[i]) alone
/// (its logits, n_past, logits_all behaviour), up to the rounding of a different summation order.
/// The forward pass, thread pool and backend of sessions[0] do the work; the sessions must not be
/// used by other threads meanwhile.
/// Before anything runs, throws Error(invalid_argument) for: no sessions, sizes that differ, a
/// null or repeated session, sessions of different Models (copies of one Model are the same
/// model) or different attention backends, an empty token span, or an id outside [0, n_vocab)
/// (naming the session and token index); Error(context_overflow) naming the first session whose
/// n_past() + new tokens exceeds its n_ctx. No session changes then. When the forward pass itself
/// fails, every session's cached tokens are left as they were and the error is rethrown.
void eval_batch(std::span<Session* const> sessions, std::span<const std::span<const Token>> tokens);

/// One decode step for several sessions: `tokens[i]` is the single new token of `sessions[i]`.
/// Same rules and errors as eval_batch.
void decode_batch(std::span<Session* const> sessions, std::span<const Token> tokens);

}  // namespace latte
