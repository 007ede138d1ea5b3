// Fuzzes the rendezvous store's server-side request parser (src/distribute/store_protocol.h):
// the input is what a client sends on one connection, read request by request as the server
// reads it (an op byte, then its capped arguments) until the bytes end or a request breaks the
// protocol. Also checks the parser's promises: no key, value, token or key list over its cap.
#include <cstring>

#include "distribute/store_protocol.h"
#include "fuzz_util.h"
#include "lockstep/distribute/store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace sp = lockstep::distribute::store_protocol;
  namespace ld = lockstep::distribute;
  size_t at = 0;
  sp::Reader in{[&](void* out, size_t n) {
    if (n > size - at) return false;
    std::memcpy(out, data + at, n);
    at += n;
    return true;
  }};
  for (;;) {
    const uint8_t op = in.pod<uint8_t>();
    if (!in.ok) break;
    sp::Request request;
    if (!sp::read_request(op, in, request)) break;
    if (request.key.size() > ld::kStoreMaxKeyBytes ||
        request.value.size() > ld::kStoreMaxValueBytes ||
        request.token.size() > ld::kStoreMaxTokenBytes ||
        request.keys.size() > ld::kStoreMaxWaitKeys || request.timeout.count() < 0 ||
        request.timeout.count() > sp::kMaxWaitMs)
      std::abort();
    if (op == sp::kBye) break;
  }
  return 0;
}
