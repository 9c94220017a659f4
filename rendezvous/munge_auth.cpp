#include "rendezvous/munge_auth.hpp"

#include <munge.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

namespace ddprun::rendezvous {

namespace {

constexpr const char* kDefaultSocket = "/run/munge/munge.socket.2";  // libmunge's, as Debian builds it

struct ContextDeleter {
  void operator()(munge_ctx_t ctx) const { munge_ctx_destroy(ctx); }
};
using Context = std::unique_ptr<std::remove_pointer_t<munge_ctx_t>, ContextDeleter>;

// libmunge allocates credentials and payloads with malloc; the caller frees them.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A context aimed at `socket`; throws MungeError when libmunge cannot make one.
Context make_context(const std::string& socket) {
  Context ctx(munge_ctx_create());
  if (!ctx) throw MungeError("MUNGE: cannot create a context (out of memory)");
  if (!socket.empty() && munge_ctx_set(ctx.get(), MUNGE_OPT_SOCKET, socket.c_str()) != EMUNGE_SUCCESS)
    throw MungeError("MUNGE: cannot use the socket " + socket + ": " + munge_ctx_strerror(ctx.get()));
  return ctx;
}

std::string why(munge_ctx_t ctx, munge_err_t err) {
  const char* text = munge_ctx_strerror(ctx);
  return text ? text : munge_strerror(err);
}

}  // namespace

std::string munge_payload(std::string_view nonce, std::string_view run_id) {
  std::string payload = "ddprun-rdzv/1 munge\n";
  payload.append(nonce).append("\n").append(run_id);
  return payload;
}

std::string munge_socket_text(const std::string& socket) { return socket.empty() ? kDefaultSocket : socket; }

std::string make_munge_credential(const std::string& socket, std::string_view nonce, std::string_view run_id) {
  Context ctx = make_context(socket);
  // Only a process of our own uid (or root) may decode it: a server of another user learns nothing from it.
  munge_ctx_set(ctx.get(), MUNGE_OPT_UID_RESTRICTION, ::geteuid());
  const std::string payload = munge_payload(nonce, run_id);
  char* raw = nullptr;
  const munge_err_t err = munge_encode(&raw, ctx.get(), payload.data(), static_cast<int>(payload.size()));
  std::unique_ptr<char, FreeDeleter> credential(raw);
  if (err != EMUNGE_SUCCESS || !credential)
    throw MungeError("MUNGE: munged at " + munge_socket_text(socket) + " made no credential: " + why(ctx.get(), err));
  return credential.get();
}

MungeCheck check_munge_credential(const std::string& socket, const std::string& credential, std::string_view nonce,
                                  std::string_view run_id, uid_t expected_uid) {
  MungeCheck check;
  if (credential.empty()) {
    check.problem = "no MUNGE credential";
    return check;
  }
  Context ctx;
  try {
    ctx = make_context(socket);
  } catch (const MungeError& e) {
    check.problem = e.what();
    return check;
  }
  void* raw_payload = nullptr;
  int length = 0;
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  const munge_err_t err = munge_decode(credential.c_str(), ctx.get(), &raw_payload, &length, &uid, &gid);
  std::unique_ptr<void, FreeDeleter> payload(raw_payload);  // allocated for some errors too (munge.h)
  if (err == EMUNGE_CRED_UNAUTHORIZED) {
    // Its maker restricted it to its own uid (make_munge_credential does), and that is not ours: another user.
    check.problem = "MUNGE credential of another user than the job's uid " + std::to_string(expected_uid) +
                    " (munged: " + why(ctx.get(), err) + ")";
    return check;
  }
  if (err != EMUNGE_SUCCESS) {
    // Expired, replayed, forged (another key), unauthorised, or munged down: all a refusal.
    check.problem = "MUNGE credential rejected: " + why(ctx.get(), err);
    return check;
  }
  check.uid = uid;
  const std::string expected = munge_payload(nonce, run_id);
  const std::string_view got(static_cast<const char*>(payload.get()), payload ? static_cast<std::size_t>(length) : 0);
  // The credential is genuine, but made for another connection or run: a replay from elsewhere.
  if (got != expected) {
    check.problem = "MUNGE credential made for another connection or run (its nonce or run id differs)";
    return check;
  }
  if (uid != expected_uid) {
    check.problem = "MUNGE credential of uid " + std::to_string(uid) + ", not the job's uid " +
                    std::to_string(expected_uid);
    return check;
  }
  check.ok = true;
  return check;
}

std::string munge_unavailable_reason(const std::string& socket) {
  try {
    make_munge_credential(socket, "probe", "probe");
    return "";
  } catch (const MungeError& e) {
    return e.what();
  }
}

}  // namespace ddprun::rendezvous
